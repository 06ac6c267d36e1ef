"""Every command against a real S3-compatible server (moto's server mode on 127.0.0.1).

Inputs are put in the bucket by other means than kg; kg reaches them with the standard AWS environment.
Each command's JSON from S3 must equal its JSON from the same files on local disk (paths aside), metadata
commands must read state files by range only, and outputs written to S3 must be what the same command
writes locally.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from tests.execution.snapshots import tree_digest

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
SNAPSHOT = FIXTURES / "snapshots" / "valid"


@pytest.fixture(scope="module")
def bucket(s3_server: Any) -> str:
    uri = s3_server.bucket("kg-test")
    s3_server.upload(SAVEPOINT, f"{uri}/savepoints/sp-1")
    s3_server.upload(SNAPSHOT, f"{uri}/snapshots/valid")
    return uri


def _without_paths(document: Any, *paths: str) -> Any:
    text = json.dumps(document)
    for path in paths:
        text = text.replace(path, "<input>")
    return json.loads(text)


@pytest.mark.parametrize(
    "args",
    [
        ("inspect",),
        ("inspect", "--subtasks"),
        ("inspect", "--key-groups"),
        ("check", "--parallelism", "4"),
        ("check", "--parallelism", "200"),
    ],
    ids=" ".join,
)
def test_savepoint_metadata_commands_read_in_place(kg, bucket, s3_server, args):
    local = kg(args[0], SAVEPOINT, *args[1:], "--json")
    for scheme in ("s3", "s3a", "s3p"):
        uri = f"{bucket}/savepoints/sp-1".replace("s3://", f"{scheme}://")
        remote = kg(args[0], uri, *args[1:], "--json")
        assert remote.exit_code == local.exit_code, remote.stderr
        assert _without_paths(remote.json(), uri) == _without_paths(local.json(), str(SAVEPOINT))


def test_metadata_commands_never_download_a_state_file(kg, bucket, s3_server):
    # Every GET of a state file must be a ranged one (HTTP 206): headers and sizes, never whole files.
    log = s3_server.log
    start = log.stat().st_size
    assert kg("inspect", f"{bucket}/savepoints/sp-1", "--key-groups").exit_code == 0
    assert kg("check", f"{bucket}/savepoints/sp-1", "-p", "4").exit_code == 0
    requests = re.sub(r"\x1b\[[0-9;]*m", "", log.read_bytes()[start:].decode(errors="replace"))
    gets = re.findall(r'"GET /kg-test/savepoints/sp-1/([^ ?"]+)[^"]*" (\d{3})', requests)
    state_gets = [(key, status) for key, status in gets if key != "_metadata"]
    assert state_gets, requests[-2000:]  # headers were read
    assert all(status == "206" for _key, status in state_gets), state_gets


@pytest.mark.parametrize(
    "args",
    [("inspect",), ("check", "--parallelism", "4"), ("plan", "--to", "4"), ("verify",)],
    ids=" ".join,
)
def test_kg_snapshot_commands(kg, bucket, args):
    uri = f"{bucket}/snapshots/valid"
    local = kg(args[0], SNAPSHOT, *args[1:], "--json")
    remote = kg(args[0], uri, *args[1:], "--json")
    assert (remote.exit_code, local.exit_code) == (0, 0), remote.stderr
    assert _without_paths(remote.json(), uri) == _without_paths(local.json(), str(SNAPSHOT))


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_rescale_a_snapshot_s3_to_s3(kg, bucket, s3_server, tmp_path, engine, request):
    if engine == "spark":
        request.getfixturevalue("spark")  # the run's one SparkSession
    target = f"{bucket}/out/snapshot-{engine}"
    done = kg("rescale", f"{bucket}/snapshots/valid", "--to", "4", "-m", "64", "--out", target,
              "--engine", engine, "--json")  # fmt: skip
    assert done.exit_code == 0, done.stderr
    assert done.json()["output"] == target
    local = kg("rescale", SNAPSHOT, "--to", "4", "-m", "64", "--out", tmp_path / "local", "--engine", engine)
    assert local.exit_code == 0, local.stderr
    downloaded = s3_server.download(target, tmp_path / "downloaded")
    # Byte-identical state files; the manifest differs only in its creation time.
    files = {p: d for p, d in tree_digest(downloaded).items() if p != "_manifest.json"}
    assert files == {p: d for p, d in tree_digest(tmp_path / "local").items() if p != "_manifest.json"}
    assert kg("verify", target).exit_code == 0
    assert kg("diff", target, tmp_path / "local").exit_code == 0
    # S3 -> local disk with the same engine writes the same files.
    to_local = kg("rescale", f"{bucket}/snapshots/valid", "--to", "4", "-m", "64", "--out",
                  tmp_path / "to-local", "--engine", engine)  # fmt: skip
    assert to_local.exit_code == 0, to_local.stderr
    assert {p: d for p, d in tree_digest(tmp_path / "to-local").items() if p != "_manifest.json"} == files


def test_generate_into_s3(kg, bucket, s3_server):
    target = f"{bucket}/generated/g1"
    done = kg("generate", target, "--operator", "c:long:500:3:64", "--json")
    assert done.exit_code == 0, done.stderr
    assert "_manifest.json" in s3_server.keys(target)
    assert kg("verify", target).exit_code == 0


def test_rescale_a_savepoint_s3_to_s3_and_s3_to_local(kg, bucket, s3_server, tmp_path):
    target = f"{bucket}/out/savepoint-p4-m1024"
    args = ("--from", "3", "--to", "4", "-m", "1024", "--engine", "local")
    done = kg("rescale", f"{bucket}/savepoints/sp-1", *args, "--out", target, "--json")
    assert done.exit_code == 0, done.stderr
    assert "_metadata" in s3_server.keys(target)
    gate = kg("check", target, "-p", "4", "-m", "1024", "--json")
    assert gate.exit_code == 0, gate.stdout
    to_local = kg("rescale", f"{bucket}/savepoints/sp-1", *args, "--out", tmp_path / "local")
    assert to_local.exit_code == 0, to_local.stderr
    downloaded = s3_server.download(target, tmp_path / "downloaded")

    # State files are named by random UUIDs, as Flink names them: the same contents, and the same state.
    def contents(root: Path) -> list[str]:
        return sorted(d for p, d in tree_digest(root).items() if p != "_metadata")

    assert contents(downloaded) == contents(tmp_path / "local")
    assert kg("convert", downloaded, "--out", tmp_path / "a.kg").exit_code == 0
    assert kg("convert", tmp_path / "local", "--out", tmp_path / "b.kg").exit_code == 0
    assert kg("diff", tmp_path / "a.kg", tmp_path / "b.kg").exit_code == 0
    # Relative handles only: the savepoint can be moved between buckets.
    assert b"s3://" not in (downloaded / "_metadata").read_bytes()


def test_rescale_local_to_s3_then_convert_and_diff(kg, bucket, s3_server, tmp_path):
    target = f"{bucket}/out/from-local"
    assert kg("rescale", SAVEPOINT, "--from", "3", "--to", "2", "--out", target).exit_code == 0
    converted = f"{bucket}/out/from-local.kg"
    assert kg("convert", target, "--out", converted).exit_code == 0
    assert "_manifest.json" in s3_server.keys(converted)
    back = kg("rescale", converted, "--from", "2", "--to", "3", "--out", tmp_path / "back.kg")
    assert back.exit_code == 0, back.stderr
    # The same chain on local disk gives the same state.
    assert kg("rescale", SAVEPOINT, "--from", "3", "--to", "2", "--out", tmp_path / "sp2").exit_code == 0
    assert kg("convert", tmp_path / "sp2", "--out", tmp_path / "sp2.kg").exit_code == 0
    local = kg("rescale", tmp_path / "sp2.kg", "--from", "2", "--to", "3", "--out", tmp_path / "local.kg")
    assert local.exit_code == 0
    assert kg("diff", tmp_path / "local.kg", tmp_path / "back.kg", "--json").exit_code == 0


def test_an_occupied_target_is_refused_before_anything_is_written(kg, bucket, s3_server):
    target = f"{bucket}/out/occupied"
    s3_server.upload(SNAPSHOT / "counter", target + "/someone-elses")
    before = s3_server.keys(target)
    done = kg(
        "rescale", f"{bucket}/snapshots/valid", "--to", "4", "--out", target, "--engine", "local", "--json"
    )
    assert done.exit_code == 2
    assert done.json()["error"]["code"] == "DESTINATION_EXISTS"
    assert s3_server.keys(target) == before


@pytest.mark.parametrize(
    ("uri", "code", "exit_code"),
    [
        ("{bucket}/savepoints/no-such-savepoint", "SNAPSHOT_NOT_FOUND", 3),
        ("s3://no-such-bucket-kg/savepoints/sp-1", "SNAPSHOT_NOT_FOUND", 3),
        ("ftp://host/savepoints/sp-1", "UNKNOWN_FILE_SYSTEM", 2),
    ],
)
def test_missing_things_are_one_line(kg, bucket, uri, code, exit_code):
    done = kg("inspect", uri.format(bucket=bucket), "--json")
    assert done.exit_code == exit_code, done.stderr
    assert done.json()["error"]["code"] == code
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_an_unreachable_store_is_exit_6(kg, bucket, monkeypatch):
    with socket_closed_port() as port:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        done = kg("check", f"{bucket}/savepoints/sp-1", "-p", "4", "--json")
    assert done.exit_code == 6, done.stderr
    assert done.json()["error"]["code"] == "STORAGE_UNREACHABLE"
    assert "AWS_ENDPOINT_URL" in done.json()["error"]["message"]


class socket_closed_port:  # noqa: N801 - a context manager read as a phrase
    """A loopback port nothing listens on, for the duration of the block."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    def __exit__(self, *_exc: object) -> None:
        return None


def test_the_input_in_the_bucket_is_never_modified(kg, bucket, s3_server, tmp_path):
    before = s3_server.keys(f"{bucket}/savepoints/sp-1")
    assert kg("rescale", f"{bucket}/savepoints/sp-1", "--to", "5", "--out", tmp_path / "x").exit_code == 0
    assert s3_server.keys(f"{bucket}/savepoints/sp-1") == before
    assert Path(tmp_path / "x" / "_metadata").is_file()


def test_bad_credentials_are_exit_6_naming_them(kg, s3_server_checking_credentials, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server_checking_credentials)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG0")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    done = kg("check", "s3://kg-test/savepoints/sp-1", "-p", "4", "--json")
    assert done.exit_code == 6, done.stderr
    error = done.json()["error"]
    assert error["code"] == "STORAGE_ACCESS_DENIED" and "credentials" in error["message"]
    assert done.stderr.count("\n") == 1


def test_kg_clean_removes_an_uncommitted_upload_and_nothing_else(kg, bucket, s3_server):
    import json
    import socket

    target = f"{bucket}/out/half-written"
    s3_server.upload(SNAPSHOT / "counter", target + "/counter")
    # A writer mark from a process that no longer runs, and no _manifest.json: kg's own leftover.
    mark = {"host": socket.gethostname(), "pid": 2**22 + 12345, "started": None}
    s3_server.put(f"{target}/.kg-writer", json.dumps(mark).encode())
    foreign = f"{bucket}/out/not-kgs"
    s3_server.upload(SNAPSHOT / "counter", foreign)
    listed = kg("clean", target, "--dry-run", "--json")
    assert listed.exit_code == 0 and listed.json()["leftovers"][0]["writer_gone"] is True
    assert s3_server.keys(target)  # a dry run removes nothing
    done = kg("clean", target, "--json")
    assert done.exit_code == 0 and done.json()["leftovers"][0]["removed"] is True
    assert s3_server.keys(target) == {}
    assert kg("clean", foreign, "--json").json()["leftovers"] == []
    assert s3_server.keys(foreign)


def test_kg_clean_removes_the_writer_mark_a_kill_left_inside_a_committed_upload(kg, bucket, s3_server):
    import json
    import socket

    # A kill between the commit (_manifest.json written) and the removal of the writer mark.
    target = f"{bucket}/out/committed-with-mark"
    s3_server.upload(SNAPSHOT, target)
    gone = {"host": socket.gethostname(), "pid": 2**22 + 12345, "started": None}
    s3_server.put(f"{target}/.kg-writer", json.dumps(gone).encode())
    before = {k: v for k, v in s3_server.keys(target).items() if k != ".kg-writer"}
    listed = kg("clean", target, "--dry-run", "--json")
    assert listed.exit_code == 0 and listed.json()["leftovers"][0]["writer_gone"] is True
    assert ".kg-writer" in s3_server.keys(target)
    done = kg("clean", target, "--json")
    assert done.exit_code == 0 and done.json()["leftovers"][0]["removed"] is True
    assert s3_server.keys(target) == before  # the committed snapshot itself is untouched
    # A mark whose writer may still run is left alone.
    s3_server.put(f"{target}/.kg-writer", json.dumps({"host": "elsewhere", "pid": 1}).encode())
    kept = kg("clean", target, "--json")
    assert kept.json()["leftovers"][0]["removed"] is False and ".kg-writer" in s3_server.keys(target)
