"""keygroup_cli.ha.javaser on bytes Flink 2.3 itself wrote (fixtures/ha/2.3, see fixtures/ha/README.md)."""

from __future__ import annotations

import base64
import io
import re
import sys

import pytest
import yaml

from keygroup_cli.core.errors import ExitCode, InvalidInputError, MissingDependencyError
from keygroup_cli.ha import javaser
from keygroup_cli.ha.storage import resolve_pointer
from tests.conftest import FIXTURES

HA = FIXTURES / "ha" / "2.3"
ZK = HA / "zookeeper"
K8S = HA / "kubernetes"


def test_znode_data_is_a_retrievable_stream_state_handle_to_a_completed_checkpoint_file():
    handle = javaser.parse_store_handle((ZK / "checkpoint-znode.bin").read_bytes(), "znode")
    assert re.fullmatch(r"file:/.+/ha/kg-ha/completedCheckpoint[0-9a-f]{12}", handle.uri)
    assert handle.size > 10_000
    assert handle.marked_for_deletion is False


def test_completed_checkpoint_gives_id_pointer_metadata_and_type():
    info = javaser.parse_completed_checkpoint((ZK / "completedCheckpoint.bin").read_bytes(), "cc")
    assert info.parsed == "javaobj"
    assert info.kind == "checkpoint" and info.type_name == "Checkpoint" and info.unclaimed is False
    match = re.fullmatch(
        r"file:/.+/checkpoints/0000000000006b670000000000004841/chk-(\d+)", info.external_pointer
    )
    assert match and int(match.group(1)) == info.checkpoint_id
    assert info.metadata_uri == info.external_pointer + "/_metadata"
    assert info.timestamp and info.timestamp > 1_600_000_000_000


def test_savepoint_restored_in_no_claim_mode_is_a_savepoint():
    info = javaser.parse_completed_checkpoint((K8S / "ha" / "completedSavepoint-2").read_bytes(), "sp")
    assert info.kind == "savepoint" and info.type_name == "Savepoint" and info.unclaimed is True
    assert info.checkpoint_id == 2


def test_connection_info_gives_address_and_the_session_uuid_javaobj_reads():
    data = (ZK / "connection_info.bin").read_bytes()
    leader = javaser.parse_leader_information(data)
    assert leader is not None
    assert leader.address.startswith("pekko://flink/user/rpc/jobmanager_")
    import javaobj.v2 as javaobj

    # The same UUID through javaobj: the object after the writeUTF block.
    uuid = next(o for o in javaobj.load(io.BytesIO(data)) if hasattr(o, "field_data"))
    fields = javaser.fields(uuid)
    most, least = fields["mostSigBits"], fields["leastSigBits"]
    assert leader.session_id == javaser._uuid(most, least)
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", leader.session_id)
    assert javaser.parse_leader_information(b"") is None


def test_configmap_values_are_delete_markers_around_the_same_handle():
    cm = yaml.safe_load((K8S / "configmap.yaml").read_text())
    values = {k: base64.b64decode(v) for k, v in cm["data"].items() if k.startswith("checkpointID-")}
    kept = javaser.parse_store_handle(values["checkpointID-0000000000000000002"], "2")
    deleting = javaser.parse_store_handle(values["checkpointID-0000000000000000003"], "3")
    assert kept.marked_for_deletion is False and deleting.marked_for_deletion is True
    # Relative to the checkout's root (fixtures/ha/README.md).
    assert kept.uri == deleting.uri == "fixtures/ha/2.3/kubernetes/ha/completedCheckpoint-2"
    assert kept.uri == javaser.parse_store_handle((K8S / "znode-2.bin").read_bytes(), "z").uri


def test_not_a_java_stream_is_an_invalid_entry():
    with pytest.raises(InvalidInputError) as err:
        javaser.parse_store_handle(b"hello", "/flink/x/jobs/j/checkpoints/1")
    assert err.value.code == "HA_ENTRY_UNREADABLE" and err.value.exit_code == ExitCode.SNAPSHOT_INVALID


def test_unparseable_completed_checkpoint_falls_back_to_its_strings_and_lists_chk_dirs(tmp_path):
    data = (ZK / "completedCheckpoint.bin").read_bytes()
    info = javaser.parse_completed_checkpoint(data, "cc")
    broken = data[: len(data) // 2]  # javaobj fails on a truncated stream
    with pytest.raises(InvalidInputError):
        javaser.parse_completed_checkpoint(broken, "cc")
    found = resolve_pointer(broken, info.checkpoint_id, "entry")
    assert found.checkpoint.parsed == "strings"
    assert found.pointer == info.external_pointer.removeprefix("file:")
    assert found.warnings and "did not parse" in found.warnings[0]
    # Without the chk-<id> string: the chk-* directories beside another chk path are listed.
    assert javaser.pointer_candidates(broken)
    fake = tmp_path / "job"
    (fake / "chk-1").mkdir(parents=True)
    (fake / f"chk-{info.checkpoint_id}").mkdir()
    stream = javaser._STREAM_MAGIC + b"\x74" + len(str(fake / "chk-1")).to_bytes(2, "big")
    stream += str(fake / "chk-1").encode() + b"\x70"
    listed = resolve_pointer(stream, info.checkpoint_id, "entry")
    assert listed.pointer == str(fake / f"chk-{info.checkpoint_id}")
    with pytest.raises(InvalidInputError) as err:
        resolve_pointer(javaser._STREAM_MAGIC + b"\x70", 7, "entry")
    assert "no chk-7 directory" in err.value.message


def test_missing_javaobj_is_a_missing_dependency_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "javaobj", None)
    monkeypatch.setitem(sys.modules, "javaobj.v2", None)
    with pytest.raises(MissingDependencyError) as err:
        javaser.parse_store_handle((ZK / "checkpoint-znode.bin").read_bytes(), "znode")
    assert err.value.exit_code == ExitCode.MISSING_DEPENDENCY == 6
    assert err.value.code == "HA_EXTRA_MISSING"
    assert "pip install -e '.[ha]'" in err.value.message and "docs/how-to/install.md" in err.value.message
