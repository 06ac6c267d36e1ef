"""Render connector state (``kg inspect --kafka-source UID``): one JSON object, or lines per operator."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from keygroup_cli.flink.connectors import KafkaSourceState, offset_text


def kafka_document(state: KafkaSourceState) -> dict[str, Any]:
    """Return one KafkaSource's state as ``kg inspect --json`` lists it under ``kafka_sources``."""
    return {
        "operator": {"uid": state.operator_uid, "operator_id": state.operator_id},
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


def print_kafka(console: Console, state: KafkaSourceState) -> None:
    """Print a KafkaSource's splits (one line per partition) and its enumerator's partitions."""

    def line(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    line(f"\n{state.operator_uid or state.operator_id} (KafkaSource)")
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
