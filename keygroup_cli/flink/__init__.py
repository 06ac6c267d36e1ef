"""Read and write Apache Flink savepoints and checkpoints without a JVM: the entry module of ``flink/``.

Every other package of kg imports Flink's format from here, never from the modules inside ``flink/``,
so those can move and split without their callers knowing. The names are loaded on first use
(``__getattr__``), so ``kg inspect`` and ``kg check`` import only what they touch (no pyarrow, no numba).

Inside, bottom up (each imports only those before it; ``tests/test_import_boundaries.py``):

- ``io/``: bytes: Java data streams, snappy, the stream sources handles open, the paths they resolve to;
- ``metadata/``: the ``_metadata`` file: where it is (``locate``), its handles, reader, writer, and the
  state files it names, checked without reading them (``state_files``);
- ``types/``: serializers, typed values, Avro, ``BinaryRowData``, the serializer-snapshot grammar and the
  serializer classes Flink ships;
- ``kernels/``: the optional numba kernels of the keyed-state walk;
- ``keyed/``: the keyed-state codec: header, layout, decode, encode, the byte-level re-key, timers;
- ``operator/``: the operator-state codec: header, streams, decode and encode;
- ``layouts/``: heap and RocksDB layouts, rewritten as canonical key groups;
- ``savepoint.py``: open a savepoint once; ``download.py``: a local copy of a remote one;
- ``check/``: deep verification (``kg verify`` and the gate);
- ``write/``: rescaled operator state, regrouped keyed state, NATIVE output, finished operators, the commit;
- ``data/``: state as data: typed Arrow tables, one key's value, Parquet export, connector state.

Every reader takes an object-store URI as well (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``; see
``keygroup_cli.storage``): paths are then ``Location`` objects, and reads are ranged requests.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keygroup_cli.flink.check.verify import verify_flink
    from keygroup_cli.flink.data.connectors import (
        KafkaSinkState,
        KafkaSourceState,
        kafka_sink_state,
        kafka_source_state,
        offset_text,
    )
    from keygroup_cli.flink.data.export import export_states
    from keygroup_cli.flink.data.lookup import (
        KeyLookup,
        KeyState,
        StateEntry,
        find_operator,
        lookup_keys,
        state_codecs,
    )
    from keygroup_cli.flink.data.tables import (
        BatchReader,
        keyed_file_count,
        state_batches,
        state_schema,
        state_table,
        typed_batch,
        typed_states,
    )
    from keygroup_cli.flink.download import copy_savepoint
    from keygroup_cli.flink.io.paths import PrefixCache, local_path, read_stream_prefix
    from keygroup_cli.flink.io.stream_handles import (
        ByteStreamHandle,
        FileHandle,
        KeyGroupsHandle,
        RelativeFileHandle,
        SegmentFileHandle,
        StreamHandle,
        stream_size,
    )
    from keygroup_cli.flink.io.stream_source import StreamSource
    from keygroup_cli.flink.kernels.native import kernels_expected, warm_kernels
    from keygroup_cli.flink.keyed.decode import decode_keyed_file
    from keygroup_cli.flink.keyed.encode import write_keyed_file
    from keygroup_cli.flink.keyed.entries import Entries
    from keygroup_cli.flink.keyed.entry_parts import part_entries
    from keygroup_cli.flink.keyed.header import KeyedStateHeader, read_keyed_header
    from keygroup_cli.flink.keyed.key_group_bytes import operator_key_group_bytes
    from keygroup_cli.flink.keyed.layout import KeyedLayout, kg_kind
    from keygroup_cli.flink.keyed.typed_entries import (
        EncodedEntry,
        encode_arrow_entry,
        encode_entry,
        require_encodable,
    )
    from keygroup_cli.flink.layouts.heap import canonical_view, needs_canonical_view
    from keygroup_cli.flink.layouts.rocksdb import load_binding
    from keygroup_cli.flink.metadata.handles import (
        SAVEPOINT_KEY_GROUPS_HANDLE,
        ChangelogBackendHandle,
        IncrementalKeyedHandle,
        KeyedHandle,
        OperatorStateHandle,
    )
    from keygroup_cli.flink.metadata.locate import FlinkCheckpoint, is_flink_savepoint
    from keygroup_cli.flink.metadata.reader import (
        CheckpointMetadata,
        MasterState,
        OperatorState,
        SubtaskState,
    )
    from keygroup_cli.flink.metadata.state_files import offsets_finding, state_file_findings, state_references
    from keygroup_cli.flink.metadata.writer import CANONICAL_SAVEPOINT_PROPERTIES, write_metadata
    from keygroup_cli.flink.operator.codec import KIND_BY_MODE, decode_operator_file, write_operator_file
    from keygroup_cli.flink.operator.header import (
        OperatorStateHeader,
        operator_header_end,
        read_operator_header,
        require_states_declared,
    )
    from keygroup_cli.flink.savepoint import KeyedStream, Savepoint, open_savepoint, try_open_savepoint
    from keygroup_cli.flink.types.avro import AvroInstant
    from keygroup_cli.flink.types.binary_row import (
        RowFields,
        locate_row_keys,
        row_fields_from_sql,
        shown_scalar,
    )
    from keygroup_cli.flink.types.serializer_snapshots import (
        AVRO_SERIALIZER_SNAPSHOT,
        KRYO_SERIALIZER_SNAPSHOT,
        POJO_SERIALIZER_SNAPSHOT,
        SerializerSnapshot,
        StateMetaInfo,
    )
    from keygroup_cli.flink.types.serializers import ROW_DATA_SERIALIZER_SNAPSHOT
    from keygroup_cli.flink.types.values import (
        Codec,
        NotEncodable,
        StateCodecs,
        TtlValue,
        ValueNotEncodable,
        arrow_rows,
        arrow_values,
    )
    from keygroup_cli.flink.write.commit import (
        SealedSavepoint,
        require_streams_decode,
        seal_in_place,
        seal_savepoint,
    )
    from keygroup_cli.flink.write.edit import (
        CompactRule,
        EditCounts,
        KeyedEdit,
        decoded_keys,
        edit_in_range,
        edited_batches,
        header_codecs,
        is_ttl,
    )
    from keygroup_cli.flink.write.edit_copy import copies_key_groups, edit_copying
    from keygroup_cli.flink.write.finished import finished_before, finished_markers, require_finished_kept
    from keygroup_cli.flink.write.keyed_tasks import (
        KeyedReadTask,
        KeyedWriteTask,
        WrittenKeyedFile,
        intersecting_tasks,
        keyed_header,
        read_entries_task,
        read_keyed_task,
        read_parts_task,
        read_tasks,
        require_keys_in_groups,
        require_stored_key_groups,
        write_keyed_task,
        write_parts_task,
    )
    from keygroup_cli.flink.write.native import WrittenDatabase, as_native, to_native, write_native_task
    from keygroup_cli.flink.write.raw_timers import RawTimers, plan_raw_timers, write_raw_timers
    from keygroup_cli.flink.write.regroup import RegroupedFile, regroup_keyed_state, shared_keyed_header
    from keygroup_cli.flink.write.rescaled import (
        RescaledOperator,
        WrittenState,
        declared_states,
        keep_one_union_copy,
        pick_header,
        write_rescaled,
    )

#: Public name -> the module inside flink/ that defines it, imported on first access.
_LAZY = {
    "kernels_expected": "keygroup_cli.flink.kernels.native",
    "warm_kernels": "keygroup_cli.flink.kernels.native",
    "KeyedStream": "keygroup_cli.flink.savepoint",
    "Savepoint": "keygroup_cli.flink.savepoint",
    "open_savepoint": "keygroup_cli.flink.savepoint",
    "try_open_savepoint": "keygroup_cli.flink.savepoint",
    "copy_savepoint": "keygroup_cli.flink.download",
    "PrefixCache": "keygroup_cli.flink.io.paths",
    "local_path": "keygroup_cli.flink.io.paths",
    "read_stream_prefix": "keygroup_cli.flink.io.paths",
    "ByteStreamHandle": "keygroup_cli.flink.io.stream_handles",
    "FileHandle": "keygroup_cli.flink.io.stream_handles",
    "KeyGroupsHandle": "keygroup_cli.flink.io.stream_handles",
    "RelativeFileHandle": "keygroup_cli.flink.io.stream_handles",
    "SegmentFileHandle": "keygroup_cli.flink.io.stream_handles",
    "StreamHandle": "keygroup_cli.flink.io.stream_handles",
    "stream_size": "keygroup_cli.flink.io.stream_handles",
    "StreamSource": "keygroup_cli.flink.io.stream_source",
    "ChangelogBackendHandle": "keygroup_cli.flink.metadata.handles",
    "IncrementalKeyedHandle": "keygroup_cli.flink.metadata.handles",
    "KeyedHandle": "keygroup_cli.flink.metadata.handles",
    "OperatorStateHandle": "keygroup_cli.flink.metadata.handles",
    "SAVEPOINT_KEY_GROUPS_HANDLE": "keygroup_cli.flink.metadata.handles",
    "FlinkCheckpoint": "keygroup_cli.flink.metadata.locate",
    "is_flink_savepoint": "keygroup_cli.flink.metadata.locate",
    "CheckpointMetadata": "keygroup_cli.flink.metadata.reader",
    "MasterState": "keygroup_cli.flink.metadata.reader",
    "OperatorState": "keygroup_cli.flink.metadata.reader",
    "SubtaskState": "keygroup_cli.flink.metadata.reader",
    "offsets_finding": "keygroup_cli.flink.metadata.state_files",
    "state_file_findings": "keygroup_cli.flink.metadata.state_files",
    "state_references": "keygroup_cli.flink.metadata.state_files",
    "CANONICAL_SAVEPOINT_PROPERTIES": "keygroup_cli.flink.metadata.writer",
    "write_metadata": "keygroup_cli.flink.metadata.writer",
    "AvroInstant": "keygroup_cli.flink.types.avro",
    "RowFields": "keygroup_cli.flink.types.binary_row",
    "locate_row_keys": "keygroup_cli.flink.types.binary_row",
    "row_fields_from_sql": "keygroup_cli.flink.types.binary_row",
    "shown_scalar": "keygroup_cli.flink.types.binary_row",
    "ROW_DATA_SERIALIZER_SNAPSHOT": "keygroup_cli.flink.types.serializers",
    "AVRO_SERIALIZER_SNAPSHOT": "keygroup_cli.flink.types.serializer_snapshots",
    "KRYO_SERIALIZER_SNAPSHOT": "keygroup_cli.flink.types.serializer_snapshots",
    "POJO_SERIALIZER_SNAPSHOT": "keygroup_cli.flink.types.serializer_snapshots",
    "SerializerSnapshot": "keygroup_cli.flink.types.serializer_snapshots",
    "StateMetaInfo": "keygroup_cli.flink.types.serializer_snapshots",
    "TtlValue": "keygroup_cli.flink.types.values",
    "Codec": "keygroup_cli.flink.types.values",
    "NotEncodable": "keygroup_cli.flink.types.values",
    "ValueNotEncodable": "keygroup_cli.flink.types.values",
    "arrow_rows": "keygroup_cli.flink.types.values",
    "arrow_values": "keygroup_cli.flink.types.values",
    "decode_keyed_file": "keygroup_cli.flink.keyed.decode",
    "write_keyed_file": "keygroup_cli.flink.keyed.encode",
    "Entries": "keygroup_cli.flink.keyed.entries",
    "part_entries": "keygroup_cli.flink.keyed.entry_parts",
    "KeyedStateHeader": "keygroup_cli.flink.keyed.header",
    "read_keyed_header": "keygroup_cli.flink.keyed.header",
    "operator_key_group_bytes": "keygroup_cli.flink.keyed.key_group_bytes",
    "KeyedLayout": "keygroup_cli.flink.keyed.layout",
    "EncodedEntry": "keygroup_cli.flink.keyed.typed_entries",
    "encode_arrow_entry": "keygroup_cli.flink.keyed.typed_entries",
    "encode_entry": "keygroup_cli.flink.keyed.typed_entries",
    "require_encodable": "keygroup_cli.flink.keyed.typed_entries",
    "KIND_BY_MODE": "keygroup_cli.flink.operator.codec",
    "decode_operator_file": "keygroup_cli.flink.operator.codec",
    "write_operator_file": "keygroup_cli.flink.operator.codec",
    "OperatorStateHeader": "keygroup_cli.flink.operator.header",
    "require_states_declared": "keygroup_cli.flink.operator.header",
    "operator_header_end": "keygroup_cli.flink.operator.header",
    "read_operator_header": "keygroup_cli.flink.operator.header",
    "canonical_view": "keygroup_cli.flink.layouts.heap",
    "needs_canonical_view": "keygroup_cli.flink.layouts.heap",
    "load_binding": "keygroup_cli.flink.layouts.rocksdb",
    "verify_flink": "keygroup_cli.flink.check.verify",
    "SealedSavepoint": "keygroup_cli.flink.write.commit",
    "require_streams_decode": "keygroup_cli.flink.write.commit",
    "seal_in_place": "keygroup_cli.flink.write.commit",
    "seal_savepoint": "keygroup_cli.flink.write.commit",
    "finished_before": "keygroup_cli.flink.write.finished",
    "finished_markers": "keygroup_cli.flink.write.finished",
    "require_finished_kept": "keygroup_cli.flink.write.finished",
    "KeyedReadTask": "keygroup_cli.flink.write.keyed_tasks",
    "KeyedWriteTask": "keygroup_cli.flink.write.keyed_tasks",
    "WrittenKeyedFile": "keygroup_cli.flink.write.keyed_tasks",
    "require_keys_in_groups": "keygroup_cli.flink.write.keyed_tasks",
    "intersecting_tasks": "keygroup_cli.flink.write.keyed_tasks",
    "keyed_header": "keygroup_cli.flink.write.keyed_tasks",
    "read_entries_task": "keygroup_cli.flink.write.keyed_tasks",
    "read_keyed_task": "keygroup_cli.flink.write.keyed_tasks",
    "read_parts_task": "keygroup_cli.flink.write.keyed_tasks",
    "read_tasks": "keygroup_cli.flink.write.keyed_tasks",
    "require_stored_key_groups": "keygroup_cli.flink.write.keyed_tasks",
    "write_keyed_task": "keygroup_cli.flink.write.keyed_tasks",
    "write_parts_task": "keygroup_cli.flink.write.keyed_tasks",
    "WrittenDatabase": "keygroup_cli.flink.write.native",
    "as_native": "keygroup_cli.flink.write.native",
    "to_native": "keygroup_cli.flink.write.native",
    "write_native_task": "keygroup_cli.flink.write.native",
    "RawTimers": "keygroup_cli.flink.write.raw_timers",
    "plan_raw_timers": "keygroup_cli.flink.write.raw_timers",
    "write_raw_timers": "keygroup_cli.flink.write.raw_timers",
    "RegroupedFile": "keygroup_cli.flink.write.regroup",
    "regroup_keyed_state": "keygroup_cli.flink.write.regroup",
    "shared_keyed_header": "keygroup_cli.flink.write.regroup",
    "RescaledOperator": "keygroup_cli.flink.write.rescaled",
    "WrittenState": "keygroup_cli.flink.write.rescaled",
    "declared_states": "keygroup_cli.flink.write.rescaled",
    "keep_one_union_copy": "keygroup_cli.flink.write.rescaled",
    "pick_header": "keygroup_cli.flink.write.rescaled",
    "write_rescaled": "keygroup_cli.flink.write.rescaled",
    "KafkaSinkState": "keygroup_cli.flink.data.connectors",
    "KafkaSourceState": "keygroup_cli.flink.data.connectors",
    "kafka_sink_state": "keygroup_cli.flink.data.connectors",
    "kafka_source_state": "keygroup_cli.flink.data.connectors",
    "offset_text": "keygroup_cli.flink.data.connectors",
    "export_states": "keygroup_cli.flink.data.export",
    "KeyLookup": "keygroup_cli.flink.data.lookup",
    "KeyState": "keygroup_cli.flink.data.lookup",
    "StateEntry": "keygroup_cli.flink.data.lookup",
    "find_operator": "keygroup_cli.flink.data.lookup",
    "lookup_keys": "keygroup_cli.flink.data.lookup",
    "BatchReader": "keygroup_cli.flink.data.tables",
    "keyed_file_count": "keygroup_cli.flink.data.tables",
    "state_table": "keygroup_cli.flink.data.tables",
    "state_batches": "keygroup_cli.flink.data.tables",
    "typed_states": "keygroup_cli.flink.data.tables",
    "typed_batch": "keygroup_cli.flink.data.tables",
    "state_codecs": "keygroup_cli.flink.data.lookup",
    "state_schema": "keygroup_cli.flink.data.tables",
    "StateCodecs": "keygroup_cli.flink.types.values",
    "kg_kind": "keygroup_cli.flink.keyed.layout",
    "CompactRule": "keygroup_cli.flink.write.edit",
    "EditCounts": "keygroup_cli.flink.write.edit",
    "KeyedEdit": "keygroup_cli.flink.write.edit",
    "decoded_keys": "keygroup_cli.flink.write.edit",
    "edit_in_range": "keygroup_cli.flink.write.edit",
    "edited_batches": "keygroup_cli.flink.write.edit",
    "header_codecs": "keygroup_cli.flink.write.edit",
    "is_ttl": "keygroup_cli.flink.write.edit",
    "copies_key_groups": "keygroup_cli.flink.write.edit_copy",
    "edit_copying": "keygroup_cli.flink.write.edit_copy",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'keygroup_cli.flink' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = sorted(_LAZY)
