"""``kg inspect``: what a savepoint, checkpoint or kg snapshot holds, read without a JVM."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from keygroup_cli.assess.summary import InputSummary, summarize, summary_document
from keygroup_cli.cli.inputs import (
    Input,
    deployment_document,
    ha_document,
    job_option,
    resolve_input,
    with_ha,
)
from keygroup_cli.cli.inspect_render import print_summary
from keygroup_cli.cli.options import operator_option, output_options
from keygroup_cli.cli.render import Output, output_for
from keygroup_cli.core.errors import UnsupportedFormatError

if TYPE_CHECKING:
    from keygroup_cli.assess.sizes import KeyGroupSizes
    from keygroup_cli.flink import FlinkCheckpoint, KafkaSinkState, KafkaSourceState

EPILOG = """\b
Examples:
  kg inspect s3-copy/savepoint-1a2b3c-4d5e6f7a8b9c      # a savepoint directory
  kg inspect /checkpoints/<job-id>                        # the latest completed chk-N
  kg inspect savepoint/_metadata --subtasks               # key-group ranges per subtask
  kg inspect savepoint/ --key-groups                      # bytes per key group; which p balance them
  kg inspect savepoint/ --key-groups --min 8 --max 24     # judge only parallelisms 8..24
  kg inspect savepoint/ --html skew.html                  # the key-group charts as one offline page
  kg inspect snapshot/ --json | jq '.operators[].uid'     # a kg snapshot, as JSON
  kg inspect zk://zk1:2181,zk2:2181/flink/my-cluster     # the checkpoint the job resumes from
  kg inspect deployment.yaml                              # the state a FlinkDeployment starts from
  kg inspect my-cluster-<job-id>-config-map.yaml           # the same, from a Kubernetes HA ConfigMap
  kg inspect savepoint/ --operator keyed-long             # one operator, by uid (Flink 1.x: by its hash)
  kg inspect savepoint/ --kafka-source orders-source      # a KafkaSource's partitions and offsets
  kg inspect savepoint/ --kafka-sink orders-sink          # a KafkaSink's transactional id prefix
"""


@click.command(epilog=EPILOG)
@click.argument("path", type=click.Path(path_type=str))
@job_option
@click.option("--subtasks", is_flag=True, help="Also list every subtask's key-group range and sizes.")
@click.option(
    "--key-groups",
    is_flag=True,
    help="Also show bytes per key group (from the key-group offsets) and the parallelisms that "
    "spread those bytes most evenly.",
)
@click.option(
    "--min", "minimum", type=int, help="Smallest parallelism judged (implies --key-groups) [default: 2]."
)
@click.option(
    "--max",
    "maximum",
    type=int,
    help="Largest parallelism judged (implies --key-groups) [default: max(4p, 32), within maxParallelism].",
)
@click.option(
    "--html",
    "html",
    metavar="FILE",
    type=click.Path(path_type=str, dir_okay=False),
    help="Also write the key-group charts and tables as one self-contained HTML page, no network or "
    "script needed (implies --key-groups).",
)
@operator_option("Only this operator: uid (by its hash where _metadata stores none) or id; repeatable.")
@click.option(
    "--kafka-source",
    "kafka_sources",
    multiple=True,
    metavar="UID",
    help="Also decode this KafkaSource operator's state: each reader's partitions and offsets, and the "
    "enumerator's partitions; repeatable.",
)
@click.option(
    "--kafka-sink",
    "kafka_sinks",
    multiple=True,
    metavar="UID",
    help="Also decode this exactly-once KafkaSink writer's state: its transactional id prefix and each "
    "writer's precommitted transactions; repeatable.",
)
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    path: str,
    job: str | None,
    subtasks: bool,
    key_groups: bool,
    minimum: int | None,
    maximum: int | None,
    html: str | None,
    operators: tuple[str, ...],
    kafka_sources: tuple[str, ...],
    kafka_sinks: tuple[str, ...],
) -> None:
    """Show the operators, state and key-group ranges of a savepoint, checkpoint or kg snapshot.

    PATH is a savepoint directory, a _metadata file, a chk-N directory, a job's checkpoint root (the
    latest completed checkpoint is used) or a kg snapshot directory; or a Flink HA store
    (zk://HOST:PORT/<root>/<cluster-id>, or an exported HA ConfigMap): the checkpoint the job would
    resume from; or a Flink Kubernetes Operator FlinkDeployment (YAML or JSON, with FlinkStateSnapshots):
    the state it starts from.
    """
    out = output_for(ctx)
    source = resolve_input(out, path, job)
    summary = _summarize(out, source.path, operators)
    wanted = key_groups or minimum is not None or maximum is not None or html is not None
    # Sized from the savepoint the summary opened: _metadata is read once.
    sizes = _key_group_sizes(out, summary, minimum, maximum) if wanted else {}
    kafka = _kafka_states(summary, kafka_sources, kafka_sinks)
    document = _document(summary, path, source, sizes, kafka, (bool(kafka_sources), bool(kafka_sinks)))
    if html is not None:
        from keygroup_cli import __version__
        from keygroup_cli.cli.skew_html import report_written, skew_page, write_page

        keyed = [sizes[op.operator_id] for op in summary.operators if op.operator_id in sizes]
        write_page(html, skew_page(path, summary.format, keyed, __version__))
        report_written(out, html, len(keyed))
    text = with_ha(source, lambda console: print_summary(console, summary, subtasks, sizes, kafka, path))
    out.result("inspect", document, text)


def _summarize(out: Output, path: str, operators: tuple[str, ...]) -> InputSummary:
    """Summarise ``path`` (a bar on a terminal), keep the ``--operator`` ones, warn what kg could not read."""
    if out.progress_enabled:
        # rich.progress is imported only when a bar can be drawn: inspect must stay fast in CI.
        from keygroup_cli.cli.progress import progress

        with progress(out) as on_progress:
            summary = summarize(path, on_progress=on_progress)
    else:
        summary = summarize(path)
    if operators:
        # Deferred: planning imports pyarrow, which plain inspect does without.
        from keygroup_cli.planning.plan import named_operators

        summary = replace(summary, operators=named_operators(summary.operators, operators))
    for warning in summary.warnings:
        out.warn(warning)
    return summary


def _document(
    summary: InputSummary,
    typed: str,
    source: Input,
    sizes: dict[str, KeyGroupSizes],
    kafka: list[KafkaSourceState | KafkaSinkState],
    asked: tuple[bool, bool],
) -> dict[str, Any]:
    """Return ``kg inspect --json``'s document: the summary, key-group sizes, HA entry, connector state."""
    document = summary_document(summary, typed)
    for op_doc in document["operators"]:
        if op_doc["operator_id"] in sizes:
            from keygroup_cli.assess.sizes import key_group_sizes_document

            op_doc["key_group_sizes"] = key_group_sizes_document(sizes[op_doc["operator_id"]])
    if source.ha is not None:
        document["ha"] = ha_document(source)
    if source.deployment is not None:
        document["deployment"] = deployment_document(source)
    if kafka:
        # Deferred: connector state is read with the state tables (pyarrow), which plain inspect does without.
        from keygroup_cli.cli.connectors_render import connector_documents

        names = {op.operator_id: op.name for op in summary.operators}
        document.update(connector_documents(kafka, *asked, names))
    return document


def _kafka_states(
    summary: InputSummary, sources: tuple[str, ...], sinks: tuple[str, ...]
) -> list[KafkaSourceState | KafkaSinkState]:
    """Return the KafkaSource and KafkaSink states of the operators named (of a Flink savepoint)."""
    if not sources and not sinks:
        return []
    from keygroup_cli.flink import FlinkCheckpoint, Savepoint, kafka_sink_state, kafka_source_state

    if not isinstance(summary.savepoint, FlinkCheckpoint):
        raise UnsupportedFormatError(
            "--kafka-source and --kafka-sink read a Flink savepoint or checkpoint, not a kg snapshot",
            code="CONNECTOR_STATE_UNKNOWN",
        )
    savepoint = Savepoint.of(summary.savepoint)
    found: list[KafkaSourceState | KafkaSinkState] = [kafka_source_state(savepoint, s) for s in sources]
    return found + [kafka_sink_state(savepoint, s) for s in sinks]


def _key_group_sizes(
    out: Output, summary: InputSummary, minimum: int | None, maximum: int | None
) -> dict[str, KeyGroupSizes]:
    """Return the key-group sizes by operator id; fail (exit 4) when no keyed operator has any."""
    # Deferred: the sizes need planning (numpy, pyarrow), which plain inspect does without.
    from keygroup_cli.assess.sizes import key_group_sizes

    path: str | FlinkCheckpoint = summary.savepoint or str(summary.path)
    report = key_group_sizes(path, minimum=minimum, maximum=maximum)
    if report.operators and not report.available:
        reason = report.operators[0].unavailable_reason or ""
        raise UnsupportedFormatError(reason, code="KEY_GROUP_SIZES_UNAVAILABLE")
    for op in report.operators:
        if not op.available:
            out.warn(f"{op.label}: {op.unavailable_reason}")
    for warning in report.warnings:
        out.warn(warning)
    return {op.operator_id: op for op in report.operators}
