"""The renderers on their own: what each prints and returns for library results, with no command around them.

Each renderer takes a value the library made (a summary, findings, Kafka state, a migration plan) and prints
it to a rich console or turns it into the JSON document of schema 3. Commands are tested end to end in the
other tests of this folder; these pin the renderers' own contract.
"""

from __future__ import annotations

from rich.console import Console

from keygroup_cli.assess.summary import summarize
from keygroup_cli.cli.check_render import print_findings
from keygroup_cli.cli.connectors_render import connector_documents, print_connectors
from keygroup_cli.cli.inspect_render import print_summary
from keygroup_cli.cli.migrate_render import change_document, render_changes
from keygroup_cli.core.findings import Finding, Severity
from keygroup_cli.flink import Savepoint, kafka_sink_state, kafka_source_state, open_savepoint
from keygroup_cli.planning.migration import MigrationRequest, plan_migration
from tests.conftest import FIXTURES

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
KAFKA = FIXTURES / "flink" / "2.0" / "kafka-p2"
UIDS = FIXTURES / "flink" / "2.3" / "uid-heap-canonical-p3"


def _console() -> Console:
    return Console(record=True, width=160, color_system=None, force_terminal=False)


def test_inspect_prints_the_count_every_command_prints_and_operators_by_uid_else_name():
    console = _console()
    print_summary(console, summarize(SAVEPOINT), False, {}, [], typed="sp/")
    text = console.export_text()
    assert "10 operators, 5 with state" in text
    assert "sp/" in text
    assert "count-no-uid" in text and "keyed-state" in text


def test_check_prints_each_finding_and_a_verdict_that_counts_alike():
    console = _console()
    findings = [
        Finding("OPERATOR_NOT_IN_JOB", Severity.ERROR, "keyed-long", "the job has no such uid"),
        Finding("MAX_PARALLELISM_DEFAULTED", Severity.WARNING, "keyed-long", "set it"),
    ]
    print_findings(console, findings, (7, 3), False, [])
    text = console.export_text()
    assert "OPERATOR_NOT_IN_JOB" in text and "the job has no such uid" in text
    assert "FAILED: 7 operators, 3 with state checked; 1 error, 1 warning" in text


def test_kafka_documents_and_text_name_the_operator_the_same_way():
    savepoint = Savepoint.of(open_savepoint(KAFKA))
    states = [kafka_source_state(savepoint, "kafka-source"), kafka_sink_state(savepoint, "kafka-sink")]
    docs = connector_documents(states, True, True)
    (source,) = docs["kafka_sources"]
    (sink,) = docs["kafka_sinks"]
    assert source["operator"]["uid"] == "kafka-source" and sink["operator"]["uid"] == "kafka-sink"
    assert set(source["operator"]) == {"uid", "name", "operator_id"}
    console = _console()
    print_connectors(console, states)
    text = console.export_text()
    assert "kafka-source" in text and "kafka-sink" in text


def test_a_migration_change_is_one_document_and_one_line():
    savepoint = open_savepoint(UIDS)
    plan = plan_migration(savepoint.metadata, MigrationRequest(renames=(("keyed-long", "keyed-long-v2"),)))
    docs = [change_document(c) for c in plan.changes]
    assert [d["action"] for d in docs] == ["rename"]
    console = _console()
    render_changes(console, docs)
    text = console.export_text()
    assert "rename" in text and "keyed-long (" in text and "-> keyed-long-v2 (" in text
