"""Timers held in raw keyed state, redistributed by key group as Flink redistributes raw keyed state.

An operator on Flink 2.x's async state API with the ForSt backend (``enableAsyncState()``), or on RocksDB
with heap timers, writes its timers into each subtask's raw keyed-state stream, one section per key group
(``flink.keyed.timers``). Flink reassigns raw keyed state by key group
(``StateAssignmentOperation.reAssignSubKeyedStates``: each new subtask gets the old handles intersected
with its key-group range), so at the same maxParallelism each new subtask's stream is the sections of its
key groups, as bytes, in key-group order. With a new maxParallelism every timer moves to its key's new key
group, as every keyed entry does: kg decodes each timer's key, hashes it, and writes the sections Flink
would write for the new key groups (every service in every key group, with the timers that fall there).

Every section is parsed, at the same maxParallelism too: raw keyed state that is not timers (an operator's
own, written through ``StateSnapshotContext.getRawKeyedOperatorStateOutput``) is refused, and each timer of
a hashable key must lie in the key group it is stored under. The streams are small (a few hundred bytes per
key group), so this runs on the driver, at planning (``plan_raw_timers``: reads and refusals before anything
is staged) and at the commit (``write_raw_timers``: one file per new subtask in the staging directory).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.javahash import HASHABLE_KEY_TYPES, hash_code
from keygroup_cli.core.keygroups import key_group_for_hash, subtask_ranges
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle, RelativeFileHandle
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.timers import (
    NotTimers,
    TimerService,
    raw_state_error,
    read_timer_section,
    timer_keys,
    write_timer_section,
)
from keygroup_cli.flink.metadata.reader import OperatorState
from keygroup_cli.flink.savepoint import Savepoint


@dataclass(frozen=True, slots=True)
class RawTimers:
    """One operator's timer sections for the new savepoint: every key group's, by new key group."""

    operator_id: str
    parallelism: int
    max_parallelism: int
    sections: Mapping[int, bytes]
    #: The timers moved (event and processing time, every service).
    timers: int


def plan_raw_timers(savepoint: Savepoint, targets: Mapping[str, tuple[int, int]]) -> dict[str, RawTimers]:
    """Read every operator's raw keyed state and place its timers in the new key groups, by operator id.

    Args:
        savepoint: The savepoint the user named (its raw streams are read where its ``_metadata`` is).
        targets: Each operator's new (parallelism, maxParallelism), by id.

    Raises:
        UnsupportedFormatError: ``FLINK_RAW_STATE``: raw keyed state that is not timers, or timers whose
            keys or namespaces kg cannot split or hash at a maxParallelism change.
        InvalidInputError: A timer stored under a key group its key does not hash to, or unreadable
            bytes.
    """
    planned = {}
    for op in savepoint.metadata.operators:
        if any(s.raw_keyed_state is not None for s in op.subtasks):
            new_p, new_max = targets.get(op.operator_id, (op.parallelism, op.max_parallelism))
            planned[op.operator_id] = _plan_operator(savepoint, op, new_p, new_max)
    return planned


def _plan_operator(savepoint: Savepoint, op: OperatorState, new_p: int, new_max: int) -> RawTimers:
    where = f"{savepoint.metadata_path}: operator {op.label!r}"
    old: dict[int, tuple[TimerService, ...]] = {}
    raw: dict[int, bytes] = {}
    for sub in op.subtasks:
        handle = sub.raw_keyed_state
        if handle is None:
            continue
        if not isinstance(handle, KeyGroupsHandle):
            raise raw_state_error(
                f"{where} subtask {sub.index}: raw keyed state in a {type(handle).__name__}"
            )
        for group, section in _sections(savepoint, handle):
            source = f"{where} subtask {sub.index} key group {group}"
            try:
                old[group] = read_timer_section(section, source)
            except NotTimers as exc:
                raise raw_state_error(
                    f"{exc}: raw keyed state that is not Flink's timers, which kg does not redistribute"
                ) from None
            raw[group] = section
            _require_stored_groups(old[group], group, op.max_parallelism, source)
    template = _template(old, where)
    moved = sum(1 for services in old.values() for _ in timer_keys(services))
    if new_max == op.max_parallelism:
        sections = {g: raw.get(g) or write_timer_section(template) for g in range(new_max)}
        return RawTimers(op.operator_id, new_p, new_max, sections, moved)
    return RawTimers(op.operator_id, new_p, new_max, _rekeyed(old, template, new_max, where), moved)


def _sections(savepoint: Savepoint, handle: KeyGroupsHandle) -> list[tuple[int, bytes]]:
    """Cut a raw keyed-state stream into its key groups' sections (each runs to the next offset)."""
    with StreamSource(handle.delegate, savepoint.directory) as src:
        data = src.read(0, src.size)
    present = sorted(
        (offset, handle.key_group_start + i) for i, offset in enumerate(handle.offsets) if offset >= 0
    )
    ends = [offset for offset, _ in present[1:]] + [len(data)]
    return [(group, data[offset:end]) for (offset, group), end in zip(present, ends, strict=True)]


def _require_stored_groups(
    services: tuple[TimerService, ...], group: int, max_parallelism: int, source: str
) -> None:
    for service in services:
        if service.key_type not in HASHABLE_KEY_TYPES:
            continue
        for key in (*service.event_keys, *service.processing_keys):
            found = key_group_for_hash(hash_code(key, service.key_type), max_parallelism)
            if found != group:
                raise InvalidInputError(
                    f"{source}: a timer of key {key!r} ({service.name}) belongs to key group {found}",
                    code="FLINK_STATE_CORRUPT",
                )


def _template(old: Mapping[int, tuple[TimerService, ...]], where: str) -> tuple[TimerService, ...]:
    """Return the services every section declares, without timers; refuse sections that disagree."""
    shapes = {
        tuple((s.name, s.key_serializer.raw, s.namespace_serializer.raw) for s in v) for v in old.values()
    }
    if len(shapes) > 1:
        raise raw_state_error(
            f"{where}: its key groups declare different timer services, which kg does not merge"
        )
    first = next(iter(old.values()), ())
    return tuple(s.empty() for s in first)


def _rekeyed(
    old: Mapping[int, tuple[TimerService, ...]], template: tuple[TimerService, ...], new_max: int, where: str
) -> dict[int, bytes]:
    """Move every timer to its key's key group under ``new_max``; every new key group gets a section."""
    event: dict[tuple[int, int], list[bytes]] = {}
    processing: dict[tuple[int, int], list[bytes]] = {}
    for group in sorted(old):
        for index, service in enumerate(old[group]):
            if (service.event or service.processing) and service.key_type not in HASHABLE_KEY_TYPES:
                raise raw_state_error(
                    f"{where}: timers of keys written by {service.key_serializer.class_name}, which kg "
                    "cannot re-hash for a new maxParallelism"
                )
            for into, timers, keys in (
                (event, service.event, service.event_keys),
                (processing, service.processing, service.processing_keys),
            ):
                for timer, key in zip(timers, keys, strict=True):
                    target = key_group_for_hash(hash_code(key, service.key_type), new_max)
                    into.setdefault((target, index), []).append(timer)
    sections = {}
    for group in range(new_max):
        services = tuple(
            replace(
                service,
                event=tuple(event.get((group, i), ())),
                processing=tuple(processing.get((group, i), ())),
            )
            for i, service in enumerate(template)
        )
        sections[group] = write_timer_section(services)
    return sections


def write_raw_timers(planned: Mapping[str, RawTimers], staging: Path) -> dict[str, list[KeyGroupsHandle]]:
    """Write each new subtask's raw keyed-state stream into ``staging``; return the handles by operator.

    Each stream holds the sections of the subtask's key groups in order, each at its offset, as
    ``KeyedStateCheckpointOutputStream`` writes them; the handle is a ``KeyGroupsStateHandle`` (tag 12).
    """
    handles: dict[str, list[KeyGroupsHandle]] = {}
    for op_id, timers in planned.items():
        written = []
        for key_groups in subtask_ranges(timers.max_parallelism, timers.parallelism):
            name = str(uuid.uuid4())
            offsets = []
            with open(staging / name, "wb") as out:
                for group in range(key_groups.start, key_groups.end + 1):
                    offsets.append(out.tell())
                    out.write(timers.sections[group])
                size = out.tell()
            written.append(
                KeyGroupsHandle(
                    12, key_groups.start, tuple(offsets), RelativeFileHandle(name, size), str(uuid.uuid4())
                )
            )
        handles[op_id] = written
    return handles


__all__ = ["RawTimers", "plan_raw_timers", "write_raw_timers"]
