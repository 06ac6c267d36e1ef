"""Benchmark: ``kg get`` of one key of a large savepoint, on local disk and from a local S3 server.

Takes a CANONICAL savepoint written by Flink (``--savepoint DIR``; ``kg.fixtures.BenchSavepointGen`` writes
one: ``java -Xmx6g -cp "$(bash fixtures/java/build.sh)" kg.fixtures.BenchSavepointGen DIR --keys 2000000
--payload-bytes 420`` is about 1 GB, String keys ``user-<i>``, operator uid ``bench-keyed``), then times
``python -m keygroup_cli get DIR -o bench-keyed -k user-<i> --json`` in fresh processes for keys spread over
the key space (median and max of the walls, interpreter start included), and the same in-process
(``open_savepoint`` + ``lookup_keys``). It then uploads the savepoint to moto's S3 server on 127.0.0.1 and
runs the same command against it, counting the HTTP requests per key from the server's log and checking
that no state file is fetched whole (every GET of one is a ranged 206). Target: under 1 s on local disk.

Usage: python benchmarks/get_key.py --savepoint DIR [--keys 9] [--total-keys 2000000] [--no-s3]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
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

from object_store import _free_port, _upload  # noqa: E402

UID = "bench-keyed"


CPU: list[float] = []


def _kg(args: list[str], env: dict[str, str]) -> float:
    """Run kg in a fresh interpreter; return its wall time (its CPU time goes to ``CPU``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "keygroup_cli", *args], env=env, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"kg {' '.join(args)} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return wall


def _in_process(savepoint: Path, keys: list[str]) -> list[float]:
    from keygroup_cli.flink.data.lookup import lookup_keys
    from keygroup_cli.flink.savepoint import open_savepoint

    walls = []
    for key in keys:
        start = time.perf_counter()
        found = lookup_keys(open_savepoint(savepoint), UID, [key])
        walls.append(time.perf_counter() - start)
        assert found.keys[0].found, key
    return walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--savepoint", type=Path, required=True)
    parser.add_argument("--keys", type=int, default=9, help="keys to look up (spread over the key space)")
    parser.add_argument("--total-keys", type=int, default=2_000_000, help="keys the savepoint holds")
    parser.add_argument("--no-s3", action="store_true")
    args = parser.parse_args()

    savepoint = args.savepoint.resolve()
    size = sum(p.stat().st_size for p in savepoint.rglob("*") if p.is_file())
    files = sum(1 for p in savepoint.rglob("*") if p.is_file())
    keys = [f"user-{i * (args.total_keys // args.keys) + 7}" for i in range(args.keys)]
    env = dict(os.environ)
    # The same interpreter start and imports without reading state: kg ranges, for the ratio.
    baseline = [_kg(["ranges", "-m", "128", "-p", "3", "--json"], env) for _ in keys]
    baseline_cpu, CPU[:] = list(CPU), []
    local = [_kg(["get", str(savepoint), "-o", UID, "-k", k, "--json"], env) for k in keys]
    local_cpu, CPU[:] = list(CPU), []
    inproc = _in_process(savepoint, keys)
    print(f"savepoint: {savepoint} ({size / 1e9:.2f} GB in {files} files); {len(keys)} keys")
    print(
        f"local disk, fresh process: median {statistics.median(local):.3f} s wall "
        f"({statistics.median(local_cpu):.3f} s CPU), max {max(local):.3f} s"
    )
    print(
        f"kg ranges, fresh process:  median {statistics.median(baseline):.3f} s wall "
        f"({statistics.median(baseline_cpu):.3f} s CPU): interpreter start and imports"
    )
    print(f"local disk, in-process:    median {statistics.median(inproc):.3f} s, max {max(inproc):.3f} s")
    ratio = statistics.median(local) / statistics.median(baseline)
    print(f"kg get / kg ranges (fresh process, same run): {ratio:.2f}")
    verdict = "met" if statistics.median(inproc) < 1.0 and statistics.median(local) < 1.0 else "NOT met"
    print(f"target: under 1 s on local disk (fresh process): {verdict}")
    if args.no_s3:
        return
    with tempfile.TemporaryDirectory(prefix="kg-bench-get-") as tmp:
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
            _upload(savepoint, endpoint, "bench", "sp")
            env.update(
                AWS_ACCESS_KEY_ID="bench",
                AWS_SECRET_ACCESS_KEY="bench",
                AWS_ENDPOINT_URL=endpoint,
                AWS_DEFAULT_REGION="us-east-1",
                AWS_EC2_METADATA_DISABLED="true",
            )
            counts, whole, walls = [], 0, []
            for key in keys:
                mark = log.stat().st_size
                walls.append(_kg(["get", "s3://bench/sp", "-o", UID, "-k", key, "--json"], env))
                text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_bytes()[mark:].decode(errors="replace"))
                counts.append(len(re.findall(r'"(GET|HEAD|PUT|POST) ', text)))
                whole += len(re.findall(r'"GET /bench/sp/(?!_metadata)[^ ?"]+ HTTP/1.1" 200', text))
        finally:
            proc.terminate()
            proc.wait(10)
    print(
        f"S3 (moto), fresh process: median {statistics.median(walls):.3f} s; requests per key: "
        f"min {min(counts)}, max {max(counts)}; state files fetched whole: {whole}"
    )


if __name__ == "__main__":
    main()
