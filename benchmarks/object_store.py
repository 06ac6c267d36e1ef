"""Benchmark: ``kg check`` and ``kg inspect`` of a savepoint in a local S3 server against local disk.

Synthesises the 10-operator x 128-subtask CANONICAL savepoint of ``inspect_check.py`` (1,280 state files
with real Flink 2.3 keyed-state headers), starts moto's S3 server on 127.0.0.1, uploads the savepoint,
and times ``python -m keygroup_cli check|inspect`` in fresh processes on both, in one run (median of
--runs). It also counts the HTTP requests kg made and checks that no state file was fetched whole
(every GET of one is a ranged 206). Target: check from S3 under 2 s.

Usage: python benchmarks/object_store.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from inspect_check import synthesise  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _upload(local: Path, endpoint: str, bucket: str, prefix: str) -> None:
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(
        access_key="bench", secret_key="bench", endpoint_override=endpoint, region="us-east-1",
        allow_bucket_creation=True,
    )  # fmt: skip
    fs.create_dir(bucket)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            with fs.open_output_stream(f"{bucket}/{prefix}/{path.relative_to(local)}") as out:
                out.write(path.read_bytes())


def _time(args: list[str], runs: int, env: dict[str, str]) -> tuple[float, list[float]]:
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "keygroup_cli", *args], env=env, capture_output=True)
        walls.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"kg {' '.join(args)} failed: {done.stderr.decode()[-2000:]}")
    return statistics.median(walls), walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kg-bench-s3-") as tmp:
        local = Path(tmp) / "savepoint"
        local.mkdir()
        synthesise(local)
        files = sum(1 for p in local.rglob("*") if p.is_file())
        port = _free_port()
        log = Path(tmp) / "moto.log"
        server = Path(sys.executable).parent / "moto_server"
        with open(log, "wb") as sink:
            proc = subprocess.Popen([sys.executable, str(server), "-H", "127.0.0.1", "-p", str(port)],
                                    stdout=sink, stderr=sink)  # fmt: skip
        endpoint = f"http://127.0.0.1:{port}"
        try:
            for _ in range(150):
                try:
                    urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.2)
            _upload(local, endpoint, "bench", "savepoints/sp")
            env = {
                **os.environ,
                "AWS_ACCESS_KEY_ID": "bench",
                "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true",
            }
            uri = "s3://bench/savepoints/sp"
            rows = []
            for command in (["check", "--parallelism", "64"], ["inspect"]):
                local_wall, _ = _time([command[0], str(local), *command[1:]], args.runs, env)
                mark = log.stat().st_size
                remote_wall, _ = _time([command[0], uri, *command[1:]], args.runs, env)
                text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_bytes()[mark:].decode(errors="replace"))
                requests = len(re.findall(r'"(GET|HEAD|PUT|POST) ', text)) // args.runs
                whole = re.findall(r'"GET /bench/savepoints/sp/(?!_metadata)[^ ?"]+ HTTP/1.1" 200', text)
                rows.append((command[0], local_wall, remote_wall, requests, len(whole)))
        finally:
            proc.terminate()
            proc.wait(10)

    print(f"savepoint: 10 operators x 128 subtasks, {files} files; median of {args.runs} runs per cell")
    print(
        f"{'command':8} {'local disk':>11} {'S3 (moto)':>10} {'S3/local':>9} {'requests':>9} "
        f"{'whole GETs':>11}"
    )
    for command, local_wall, remote_wall, requests, whole in rows:
        print(
            f"{command:8} {local_wall:10.2f}s {remote_wall:9.2f}s {remote_wall / local_wall:8.1f}x "
            f"{requests:9d} {whole:11d}"
        )
    check = rows[0]
    print(f"target: check from S3 < 2 s: {'met' if check[2] < 2.0 else 'NOT met'} ({check[2]:.2f} s)")


if __name__ == "__main__":
    main()
