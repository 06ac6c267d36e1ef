"""``kg check --job-uids`` names candidates for unmapped stateful operators and the ``kg migrate`` fix."""

from __future__ import annotations

from pathlib import Path

from keygroup_cli.core.keygroups import operator_id_for_uid
from tests.conftest import FIXTURES

V6 = FIXTURES / "flink" / "2.3" / "uid-heap-canonical-p3"
JOB = ("uid-source", "keyed-string", "string-drop", "string-sink", "keyed-long-v2", "long-drop", "long-sink")


def test_check_prints_the_command_and_it_fixes_the_mapping(kg, tmp_path: Path) -> None:
    uids = tmp_path / "uids.txt"
    uids.write_text("\n".join(JOB) + "\n", encoding="utf-8")
    text = kg("check", V6, "--job-uids", uids)
    assert text.exit_code == 1
    dest = tmp_path / "fixed"
    command = f"kg migrate {V6} --out {V6}-migrated --rename keyed-long=keyed-long-v2"
    assert text.stdout.splitlines()[-2:] == [
        "keyed-long: candidate 'keyed-long-v2' (uids 87% alike): --rename keyed-long=keyed-long-v2",
        f"Restore the mapping: {command}",
    ]
    doc = kg("check", V6, "--job-uids", uids, "--json").json()
    assert doc["migrate"]["command"] == command
    assert doc["migrate"]["candidates"][0]["argument"] == "keyed-long=keyed-long-v2"
    # The command (to another --out) restores the mapping: kg check then passes for that job.
    args = command.split()[2:]
    args[args.index("--out") + 1] = str(dest)
    assert kg("migrate", *args).exit_code == 0
    after = kg("check", dest, "--job-uids", uids, "--json").json()
    assert after["ok"] is True and after["migrate"] is None


def test_check_without_job_uids_has_no_migrate_part(kg) -> None:
    assert "migrate" not in kg("check", V6, "--json").json()


def test_against_a_new_job_savepoint_matches_by_state_and_the_command_fixes_it(kg, tmp_path: Path) -> None:
    """--against NEW: uids nothing alike; the state names and serializers find the operators."""
    new_job = tmp_path / "new-job"
    renames = ("--rename", "keyed-long=sum-per-id", "--rename", "keyed-string=count-per-name")
    assert kg("migrate", V6, "--out", new_job, *renames).exit_code == 0  # the new version's savepoint
    text = kg("check", V6, "--against", new_job)
    assert text.exit_code == 1, text.stderr  # OPERATOR_NOT_IN_JOB until the state is mapped
    fixes = "--rename keyed-string=count-per-name --rename keyed-long=sum-per-id"
    command = f"kg migrate {V6} --out {V6}-migrated {fixes}"
    assert text.stdout.splitlines()[-1] == f"Restore the mapping: {command}"
    assert (
        "keyed-long: candidate 'sum-per-id' (state names and serializers equal (sum: LongSerializer, "
        "2 timer states)): --rename keyed-long=sum-per-id"
    ) in text.stdout
    doc = kg("check", V6, "--against", new_job, "--json").json()
    codes = [(f["code"], f["subject"]) for f in doc["findings"]]
    assert ("OPERATOR_STATE_CANDIDATE", "keyed-long") in codes and (
        "OPERATOR_NOT_IN_JOB",
        "keyed-long",
    ) in codes
    assert doc["migrate"]["command"] == command
    long_candidate = doc["migrate"]["candidates"][1]
    assert long_candidate["state_matches"] == [operator_id_for_uid("sum-per-id")]
    assert long_candidate["ambiguous"] is False
    fixed = tmp_path / "fixed"
    args = command.split()[2:]
    args[args.index("--out") + 1] = str(fixed)
    assert kg("migrate", *args).exit_code == 0
    after = kg("check", fixed, "--against", new_job, "--json").json()
    assert after["ok"] is True and after["migrate"] is None


def test_against_with_two_fitting_operators_is_a_warning_and_no_command(kg, tmp_path: Path) -> None:
    """A new job with keyed-long's state twice (both absent from the old savepoint): kg does not choose."""
    from dataclasses import replace

    from keygroup_cli.flink.metadata.locate import find_metadata
    from keygroup_cli.flink.metadata.reader import parse_metadata
    from keygroup_cli.flink.metadata.writer import write_metadata

    new_job = tmp_path / "new-job"
    assert kg("migrate", V6, "--out", new_job, "--rename", "keyed-long=sum-a").exit_code == 0
    meta_path = find_metadata(new_job)
    meta = parse_metadata(meta_path.read_bytes())
    (sum_a,) = (op for op in meta.operators if op.uid == "sum-a")
    twin = replace(sum_a, uid="sum-b", name="sum-b", operator_id=operator_id_for_uid("sum-b"))
    meta_path.write_bytes(write_metadata(replace(meta, operators=(*meta.operators, twin))))
    r = kg("check", V6, "--against", new_job, "--json")
    doc = r.json()
    (finding,) = (f for f in doc["findings"] if f["code"] == "OPERATOR_STATE_AMBIGUOUS")
    assert finding["severity"] == "warning" and finding["subject"] == "keyed-long"
    assert "'sum-a', 'sum-b'" in finding["message"] and "kg does not choose" in finding["message"]
    assert doc["migrate"]["command"] is None and doc["migrate"]["candidates"][0]["ambiguous"] is True
    assert r.exit_code == 1  # keyed-long's state is still not in the job
    text = kg("check", V6, "--against", new_job)
    assert text.stdout.splitlines()[-1] == f"keyed-long: {finding['message']}"


def test_against_an_unreadable_savepoint_is_exit_3(kg, tmp_path: Path) -> None:
    r = kg("check", V6, "--against", tmp_path / "nothing-here")
    assert r.exit_code == 3 and r.stderr.startswith("kg: error: ") and r.stderr.count("\n") == 1
