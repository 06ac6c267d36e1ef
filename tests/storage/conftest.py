"""A real S3-compatible server for the storage tests: moto's server mode on 127.0.0.1, one per run.

The server is a separate process speaking S3's HTTP API; kg reaches it through pyarrow's S3 file system
with nothing but the standard AWS environment (``AWS_ENDPOINT_URL`` and keys), as a user reaches MinIO.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class S3Server:
    """A running server: its endpoint and the environment that reaches it."""

    endpoint: str
    env: dict[str, str]
    #: The server's request log (one line per HTTP request, with its status).
    log: Path

    def bucket(self, name: str) -> str:
        """Create bucket ``name`` (if missing) and return ``s3://name``."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key="test",
            secret_key="test",
            endpoint_override=self.endpoint,
            region="us-east-1",
            allow_bucket_creation=True,
        )
        fs.create_dir(name)
        return f"s3://{name}"

    def upload(self, local: Path, uri: str) -> str:
        """Copy the local directory ``local`` to ``uri`` (test input, put there without kg)."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key="test", secret_key="test", endpoint_override=self.endpoint, region="us-east-1"
        )
        target = uri.removeprefix("s3://")
        for path in sorted(local.rglob("*")):
            if path.is_file():
                with fs.open_output_stream(f"{target}/{path.relative_to(local)}") as out:
                    out.write(path.read_bytes())
        return uri

    def put(self, uri: str, data: bytes) -> None:
        """Write one object."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key="test", secret_key="test", endpoint_override=self.endpoint, region="us-east-1"
        )
        with fs.open_output_stream(uri.removeprefix("s3://")) as out:
            out.write(data)

    def keys(self, uri: str) -> dict[str, int]:
        """Return ``{relative key: size}`` of every object under ``uri``."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key="test", secret_key="test", endpoint_override=self.endpoint, region="us-east-1"
        )
        base = uri.removeprefix("s3://").rstrip("/")
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        return {i.path[len(base) + 1 :]: i.size for i in infos if i.type == pafs.FileType.File}

    def download(self, uri: str, local: Path) -> Path:
        """Copy every object under ``uri`` into the local directory ``local``."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key="test", secret_key="test", endpoint_override=self.endpoint, region="us-east-1"
        )
        base = uri.removeprefix("s3://").rstrip("/")
        for key in self.keys(uri):
            (local / key).parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(f"{base}/{key}") as fh:
                (local / key).write_bytes(fh.read())
        return local


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(tmp: Path, extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str, Path]:
    server = Path(sys.executable).parent / "moto_server"
    assert server.is_file(), "moto's server is missing: pip install -e '.[spark,test]' installs moto[server]"
    port = _free_port()
    log = tmp / "moto.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(server), "-H", "127.0.0.1", "-p", str(port)],
            stdout=sink,
            stderr=sink,
            env={**os.environ, **(extra_env or {})},
        )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            return proc, endpoint, log
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """Start moto_server on a free loopback port; point the AWS environment at it for the session."""
    proc, endpoint, log = _start(tmp_path_factory.mktemp("moto"))
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield S3Server(endpoint, env, log)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _stop(proc)


@pytest.fixture(scope="module")
def s3_server_checking_credentials(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second server that, like S3, refuses requests signed with keys it does not know: its endpoint."""
    proc, endpoint, _log = _start(tmp_path_factory.mktemp("moto-auth"), {"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    try:
        yield endpoint
    finally:
        _stop(proc)


@pytest.fixture
def spark_reaching_s3(spark: Any, s3_server: S3Server) -> Iterator[Any]:
    """The run's one SparkSession, its Python workers given the S3 server's environment.

    The session may have started before ``s3_server`` set the AWS variables, and its workers keep the
    environment they started with. pyspark sends ``SparkContext.environment`` with every Python function and
    starts workers for a new environment, so tasks run from here reach the server as executors configured
    with ``spark.executorEnv.*`` would, whatever ran first.
    """
    environment = spark.sparkContext.environment
    saved = dict(environment)
    environment.update(s3_server.env)
    try:
        yield spark
    finally:
        environment.clear()
        environment.update(saved)
