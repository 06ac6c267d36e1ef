"""``kg check --job-uids`` names candidates for unmapped stateful operators and the ``kg migrate`` fix."""

from __future__ import annotations

from pathlib import Path

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
