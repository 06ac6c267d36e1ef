"""The Arrow rows of keyed and operator state, shared by both formats.

A kg snapshot stores them in Parquet (``snapshot.parquet``); the Flink codecs decode savepoint state into
them and encode it back (``flink.keyed``). Keyed rows are ``key_group, state, key, namespace, user_key,
value, timestamp`` (``state`` a dictionary column, ``key`` typed by the key type); operator-state rows are
``state, position, entry_key, value``. See ``docs/reference/snapshot-format.md``.
"""

from __future__ import annotations

import pyarrow as pa

from keygroup_cli.core.errors import InvalidArgumentError

#: Arrow type of the ``key`` column per kg key type.
KEY_ARROW_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "int": pa.int32(),
    "boolean": pa.bool_(),
    "row": pa.binary(),
    "binary": pa.binary(),
}
STATE_TYPE = pa.dictionary(pa.int32(), pa.string())
KEYED_COLUMNS = ("key_group", "state", "key", "namespace", "user_key", "value", "timestamp")
OPERATOR_COLUMNS = ("state", "position", "entry_key", "value")

OPERATOR_SCHEMA = pa.schema(
    [
        pa.field("state", pa.string(), nullable=False),
        pa.field("position", pa.int32(), nullable=False),
        pa.field("entry_key", pa.binary()),
        pa.field("value", pa.binary(), nullable=False),
    ]
)


def keyed_schema(key_type: str) -> pa.Schema:
    """Return the Arrow schema of a keyed state file whose keys are of ``key_type``."""
    if key_type not in KEY_ARROW_TYPES:
        raise InvalidArgumentError(
            f"Unknown key type {key_type!r}; expected one of {', '.join(KEY_ARROW_TYPES)}",
            code="UNKNOWN_KEY_TYPE",
        )
    return pa.schema(
        [
            pa.field("key_group", pa.int32(), nullable=False),
            pa.field("state", STATE_TYPE, nullable=False),
            pa.field("key", KEY_ARROW_TYPES[key_type], nullable=False),
            pa.field("namespace", pa.binary(), nullable=False),
            pa.field("user_key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("timestamp", pa.int64()),
        ]
    )


__all__ = [
    "KEYED_COLUMNS",
    "KEY_ARROW_TYPES",
    "OPERATOR_COLUMNS",
    "OPERATOR_SCHEMA",
    "STATE_TYPE",
    "keyed_schema",
]
