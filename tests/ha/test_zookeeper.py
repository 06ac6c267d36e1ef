"""keygroup_cli.ha.zookeeper on in-memory trees in the layouts of Flink 1.15-1.20 and 2.x (no server).

The znode data are the real bytes of fixtures/ha/2.3; the fake exposes only the three read calls, so a
write attempt would fail the test.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from keygroup_cli.core.errors import ExitCode, InvalidArgumentError, InvalidInputError
from keygroup_cli.ha import javaser
from keygroup_cli.ha.zookeeper import parse_uri, resolve_zookeeper
from tests.conftest import FIXTURES

ZK = FIXTURES / "ha" / "2.3" / "zookeeper"
K8S = FIXTURES / "ha" / "2.3" / "kubernetes"
JOB = "0000000000006b670000000000000005"
ROOT = "/flink/prod"


@dataclass
class Stat:
    ephemeralOwner: int = 0  # noqa: N815 - kazoo's ZnodeStat field name


class FakeZooKeeper:
    """Read-only in-memory ZooKeeper: path -> (data, ephemeral owner)."""

    def __init__(self, nodes: dict[str, tuple[bytes, int]]) -> None:
        self.nodes = dict(nodes)
        for path in list(nodes):
            parts = path.split("/")
            for i in range(2, len(parts)):
                self.nodes.setdefault("/".join(parts[:i]), (b"", 0))
        self.calls: list[str] = []

    def get(self, path):
        self.calls.append(f"get {path}")
        data, owner = self.nodes[path]
        return data, Stat(owner)

    def get_children(self, path):
        self.calls.append(f"ls {path}")
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix) :].split("/")[0] for p in self.nodes if p.startswith(prefix)})

    def exists(self, path):
        return Stat() if path in self.nodes else None


@pytest.fixture
def handle_file(tmp_path) -> tuple[bytes, Path]:
    """A znode's data pointing at a real CompletedCheckpoint (copied so its path exists here)."""
    # The Kubernetes fixture's handle points to fixtures/ha/2.3/kubernetes/ha/completedCheckpoint-2, relative
    # to the checkout's root; rebuild the same handle with this copy's absolute path instead.
    target = tmp_path / "ha" / "completedCheckpoint-2"
    target.parent.mkdir()
    shutil.copyfile(K8S / "ha" / "completedCheckpoint-2", target)
    return _handle_bytes(target), target


def _handle_bytes(target: Path) -> bytes:
    original = (K8S / "znode-2.bin").read_bytes()
    old = javaser.parse_store_handle(original, "z").uri.encode()
    new = target.as_uri().replace("file:///", "file:/").encode()
    # The URI string is one TC_STRING: patch its 2-byte length with it.
    i = original.index(old)
    return original[: i - 2] + len(new).to_bytes(2, "big") + new + original[i + len(old) :]


def _tree(data: bytes, layout: str, *, live: bool, ids=(1, 2)) -> FakeZooKeeper:
    nodes: dict[str, tuple[bytes, int]] = {}
    for i in ids:
        nodes[f"{ROOT}/jobs/{JOB}/checkpoints/{i:019d}"] = (data, 0)
        if live:
            nodes[f"{ROOT}/jobs/{JOB}/checkpoints/{i:019d}/locks/4a0c"] = (b"127.0.0.1", 0x77)
    nodes[f"{ROOT}/jobs/{JOB}/checkpoint_id_counter"] = (b"\x00\x00\x00\x03", 0)
    plans = "execution-plans" if layout == "2.x" else "jobgraphs"
    nodes[f"{ROOT}/{plans}/{JOB}"] = (b"", 0)
    nodes[f"{ROOT}/leader/latch"] = (b"", 0)
    if live:
        leader = f"job-{JOB}" if layout == "2.x" else JOB
        nodes[f"{ROOT}/leader/latch/_c_1-latch-0000000000"] = (b"", 0x77)
        nodes[f"{ROOT}/leader/{leader}/connection_info"] = ((ZK / "connection_info.bin").read_bytes(), 0x77)
    return FakeZooKeeper(nodes)


def _resolve(fake: FakeZooKeeper, job: str | None = None):
    return resolve_zookeeper(
        f"zk://zk1:2181,zk2:2181{ROOT}", job, reader_factory=lambda hosts: (fake, lambda: None)
    )


@pytest.mark.parametrize("layout", ["2.x", "1.x"])
def test_highest_checkpoint_and_live_leader_in_each_layout(handle_file, layout):
    data, _ = handle_file
    fake = _tree(data, layout, live=True, ids=(1, 2, 10))
    r = _resolve(fake)
    assert r.job_id == JOB and r.layout == layout
    assert r.checkpoint_id == 10 and r.checkpoint_ids == (1, 2, 10)
    assert r.entry == f"{ROOT}/jobs/{JOB}/checkpoints/0000000000000000010"
    # The fixture's pointer is relative to the checkout's root (fixtures/ha/README.md).
    assert r.pointer == f"fixtures/flink/2.3/heap-checkpoint-p2-maxp128-string/{JOB}/chk-2"
    assert r.kind == "checkpoint"
    assert r.live_leader
    assert len(r.live_reasons) == 3
    assert r.leader is not None and r.leader.address.startswith("pekko://flink/user/rpc/jobmanager_")
    assert r.leader.zk_session == "0x77"
    assert all(c.split()[0] in ("get", "ls") for c in fake.calls)


def test_no_leader_after_the_session_expired(handle_file):
    data, _ = handle_file
    r = _resolve(_tree(data, "2.x", live=False))
    assert not r.live_leader and r.live_reasons == () and r.leader is None


def test_job_must_be_named_when_the_store_holds_several(handle_file):
    data, _ = handle_file
    fake = _tree(data, "2.x", live=False)
    other = "00000000000000000000000000000abc"
    fake.nodes[f"{ROOT}/jobs/{other}/checkpoints/{1:019d}"] = (data, 0)
    fake.nodes[f"{ROOT}/jobs/{other}/checkpoints"] = (b"", 0)
    fake.nodes[f"{ROOT}/jobs/{other}"] = (b"", 0)
    with pytest.raises(InvalidArgumentError) as err:
        _resolve(fake)
    assert err.value.code == "HA_JOB_AMBIGUOUS" and JOB in err.value.message and other in err.value.message
    assert _resolve(fake, other).job_id == other
    with pytest.raises(InvalidArgumentError) as err:
        _resolve(fake, "f" * 32)
    assert err.value.code == "HA_JOB_NOT_FOUND" and err.value.exit_code == ExitCode.USAGE


def test_empty_checkpoint_store_and_missing_cluster(handle_file):
    data, _ = handle_file
    fake = _tree(data, "2.x", live=False, ids=())
    fake.nodes[f"{ROOT}/jobs/{JOB}/checkpoints"] = (b"", 0)
    with pytest.raises(InvalidInputError) as err:
        _resolve(fake)
    assert err.value.code == "HA_NO_CHECKPOINT"
    with pytest.raises(InvalidInputError) as err:
        resolve_zookeeper("zk://zk1:2181/elsewhere", reader_factory=lambda hosts: (fake, lambda: None))
    assert err.value.code == "HA_CLUSTER_NOT_FOUND"


def test_missing_storage_file_is_reported(handle_file):
    data, target = handle_file
    target.unlink()
    with pytest.raises(InvalidInputError) as err:
        _resolve(_tree(data, "2.x", live=False))
    assert err.value.code == "HA_STORAGE_FILE_MISSING" and str(target) in err.value.message


def test_uri_parsing():
    assert parse_uri("zk://a:2181,b:2181/flink/prod") == ("a:2181,b:2181", "/flink/prod")
    assert parse_uri("zk://a:2181") == ("a:2181", "/flink/default")
    with pytest.raises(InvalidArgumentError):
        parse_uri("zk:///flink")


def test_unreachable_server_is_one_error_line(kg, monkeypatch):
    from tests.ha.harness import free_port

    monkeypatch.setattr("keygroup_cli.ha.zookeeper.CONNECT_TIMEOUT", 1.0)
    result = kg("inspect", f"zk://127.0.0.1:{free_port()}/flink/x", "--json")
    assert result.exit_code == ExitCode.SNAPSHOT_INVALID
    assert result.json()["error"]["code"] == "HA_STORE_UNREACHABLE"
    assert result.stderr.count("\n") == 1
