"""Render connector state (``kg inspect --kafka-source UID``): one JSON object, or lines per operator."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console

from keygroup_cli.assess.summary import operator_label
from keygroup_cli.cli.render import operator_document
from keygroup_cli.flink import KafkaSinkState, KafkaSourceState, offset_text

#: Operator names by id (``kg inspect``'s summary has them; a connector's state does not).
Names = Mapping[str, "str | None"]


def _operator(state: KafkaSourceState | KafkaSinkState, names: Names) -> dict[str, Any]:
    return operator_document(state.operator_uid, names.get(state.operator_id), state.operator_id)


def _label(state: KafkaSourceState | KafkaSinkState, names: Names) -> str:
    return operator_label(state.operator_uid, names.get(state.operator_id), state.operator_id)


def kafka_document(state: KafkaSourceState, names: Names | None = None) -> dict[str, Any]:
    """Return one KafkaSource's state as ``kg inspect --json`` lists it under ``kafka_sources``."""
    return {
        "operator": _operator(state, names or {}),
        "splits": [
            {
                "subtask": s.subtask,
                "topic": s.topic,
                "partition": s.partition,
                "offset": s.offset,
                "stopping_offset": s.stopping_offset,
            }
            for s in state.splits
        ],
        "enumerator": None
        if state.partitions is None
        else {
            "partitions": [
                {"topic": p.topic, "partition": p.partition, "status": p.status} for p in state.partitions
            ],
            "initial_discovery_finished": state.initial_discovery_finished,
        },
    }


def print_kafka(console: Console, state: KafkaSourceState, names: Names | None = None) -> None:
    """Print a KafkaSource's splits (one line per partition) and its enumerator's partitions."""

    def line(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    line(f"\n{_label(state, names or {})} (KafkaSource)")
    for s in state.splits:
        stop = "" if s.stopping_offset is None else f", stops at {offset_text(s.stopping_offset)}"
        line(
            f"  {s.topic} partition {s.partition}: offset {offset_text(s.offset)} (subtask {s.subtask}{stop})"
        )
    if not state.splits:
        line("  no splits (no reader holds a partition)")
    if state.partitions is not None:
        statuses = sorted({p.status for p in state.partitions})
        counts = ", ".join(f"{sum(p.status == s for p in state.partitions)} {s}" for s in statuses)
        done = "finished" if state.initial_discovery_finished else "not finished"
        line(f"  enumerator: {len(state.partitions)} partitions ({counts}); initial discovery {done}")


def kafka_sink_document(state: KafkaSinkState, names: Names | None = None) -> dict[str, Any]:
    """Return one KafkaSink's writer state as ``kg inspect --json`` lists it under ``kafka_sinks``."""
    return {
        "operator": _operator(state, names or {}),
        "transactional_id_prefixes": list(state.prefixes),
        "writers": [
            {
                "subtask": w.subtask,
                "transactional_id_prefix": w.transactional_id_prefix,
                "owned_subtask": w.owned_subtask,
                "owned_subtasks": w.owned_subtasks,
                "ownership": w.ownership,
                "precommitted": [{"transactional_id": t, "checkpoint_id": c} for t, c in w.precommitted],
            }
            for w in state.writers
        ],
    }


def print_kafka_sink(console: Console, state: KafkaSinkState, names: Names | None = None) -> None:
    """Print a KafkaSink's transactional id prefix and each writer's precommitted transactions."""

    def line(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    line(f"\n{_label(state, names or {})} (KafkaSink)")
    if not state.writers:
        line("  no writer state (an at-least-once or none sink keeps none)")
        return
    line(f"  transactional id prefix: {', '.join(state.prefixes)}")
    for w in state.writers:
        open_txns = ", ".join(f"{t} (checkpoint {c})" for t, c in w.precommitted) or "none"
        line(f"  subtask {w.subtask}: precommitted {open_txns}")


def connector_documents(
    states: list[KafkaSourceState | KafkaSinkState], sources: bool, sinks: bool, names: Names | None = None
) -> dict[str, Any]:
    """Return the ``kafka_sources`` / ``kafka_sinks`` keys of ``kg inspect --json`` (each only if asked)."""
    out: dict[str, Any] = {}
    if sources:
        out["kafka_sources"] = [kafka_document(s, names) for s in states if isinstance(s, KafkaSourceState)]
    if sinks:
        out["kafka_sinks"] = [kafka_sink_document(s, names) for s in states if isinstance(s, KafkaSinkState)]
    return out


def print_connectors(
    console: Console, states: list[KafkaSourceState | KafkaSinkState], names: Names | None = None
) -> None:
    """Print each connector's state, in the order asked."""
    for state in states:
        if isinstance(state, KafkaSourceState):
            print_kafka(console, state, names)
        else:
            print_kafka_sink(console, state, names)
