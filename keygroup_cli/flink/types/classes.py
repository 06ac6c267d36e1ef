"""The serializer snapshot classes Flink ships, and the check that a state header names one of them.

A restore loads every ``TypeSerializerSnapshot`` class a state header names
(``TypeSerializerSnapshot.readVersionedSnapshot``: ``Class.forName``). A class name with one letter changed,
added or dropped from one Flink ships is damage: no job has that class on its class path, so Flink cannot
restore the state, yet the header still parses (an unknown snapshot's body is delimited by backtracking,
``flink.keyed.header``). ``near_miss`` finds such a name. Classes Flink does not ship (user
serializers) and classes kg does not list are left alone: only a near miss of a listed class is refused,
and no two listed classes are one edit apart except ``Tuple0SerializerSnapshot`` and
``TupleSerializerSnapshot``, which are both listed.

``FLINK_SERIALIZER_SNAPSHOTS`` is every serializer snapshot class in Flink 2.3.0's ``flink-dist``,
``flink-table-runtime`` and the other jars of its distribution, plus those kg reads by name
(``flink-avro``'s, and the ones in the savepoints under ``fixtures/flink``).
"""

from __future__ import annotations

from functools import lru_cache

#: Serializer snapshot classes Flink ships (see the module docstring).
FLINK_SERIALIZER_SNAPSHOTS = frozenset(
    (
        "org.apache.flink.api.common.typeutils.CompositeTypeSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.GenericTypeSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.SimpleTypeSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.SingleThreadAccessCheckingTypeSerializer"
        "$SingleThreadAccessCheckingTypeSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.TypeSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.BigDecSerializer$BigDecSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.BigIntSerializer$BigIntSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.BitmapSerializer$BitmapSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.BooleanSerializer$BooleanSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.BooleanValueSerializer$BooleanValueSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.ByteSerializer$ByteSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.ByteValueSerializer$ByteValueSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.CharSerializer$CharSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.CharValueSerializer$CharValueSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.DateSerializer$DateSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.DoubleSerializer$DoubleSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.DoubleValueSerializer$DoubleValueSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.EnumSerializer$EnumSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.FloatSerializer$FloatSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.FloatValueSerializer$FloatValueSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.GenericArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.InstantSerializer$InstantSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.IntSerializer$IntSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.IntValueSerializer$IntValueSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.ListSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.LocalDateSerializer$LocalDateSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.LocalDateTimeSerializer$LocalDateTimeSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.LocalTimeSerializer$LocalTimeSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.LongValueSerializer$LongValueSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.MapSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.NullValueSerializer$NullValueSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.SetSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.ShortSerializer$ShortSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.ShortValueSerializer$ShortValueSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.SqlDateSerializer$SqlDateSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.SqlTimeSerializer$SqlTimeSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.SqlTimestampSerializer$SqlTimestampSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.StringSerializer$StringSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.StringValueSerializer$StringValueSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.VariantSerializer$VariantSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.VoidSerializer$VoidSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.BooleanPrimitiveArraySerializer"
        "$BooleanPrimitiveArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer"
        "$BytePrimitiveArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.CharPrimitiveArraySerializer"
        "$CharPrimitiveArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.DoublePrimitiveArraySerializer"
        "$DoublePrimitiveArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.FloatPrimitiveArraySerializer"
        "$FloatPrimitiveArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.IntPrimitiveArraySerializer"
        "$IntPrimitiveArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.LongPrimitiveArraySerializer"
        "$LongPrimitiveArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.ShortPrimitiveArraySerializer"
        "$ShortPrimitiveArraySerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.array.StringArraySerializer"
        "$StringArraySerializerSnapshot",
        "org.apache.flink.api.java.typeutils.runtime.CopyableValueSerializer$CopyableValueSerializerSnapshot",
        "org.apache.flink.api.java.typeutils.runtime.JavaEitherSerializerSnapshot",
        "org.apache.flink.api.java.typeutils.runtime.NullableSerializer$NullableSerializerSnapshot",
        "org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot",
        "org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerSnapshot",
        "org.apache.flink.api.java.typeutils.runtime.Tuple0SerializerSnapshot",
        "org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot",
        "org.apache.flink.api.java.typeutils.runtime.ValueSerializer$ValueSerializerSnapshot",
        "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot",
        "org.apache.flink.cep.nfa.DeweyNumber$DeweyNumberSerializer$DeweyNumberSerializerSnapshot",
        "org.apache.flink.cep.nfa.NFAStateSerializerSnapshot",
        "org.apache.flink.cep.nfa.sharedbuffer.EventId$EventIdSerializer$EventIdSerializerSnapshot",
        "org.apache.flink.cep.nfa.sharedbuffer.LockableTypeSerializerSnapshot",
        "org.apache.flink.cep.nfa.sharedbuffer.NodeId$NodeIdSerializer$NodeIdSerializerSnapshot",
        "org.apache.flink.cep.nfa.sharedbuffer.SharedBufferEdge$SharedBufferEdgeSerializer"
        "$SharedBufferEdgeSerializerSnapshot",
        "org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot",
        "org.apache.flink.queryablestate.client.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot",
        "org.apache.flink.runtime.state.ArrayListSerializerSnapshot",
        "org.apache.flink.runtime.state.JavaSerializer$JavaSerializerSnapshot",
        "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot",
        "org.apache.flink.runtime.state.ttl.TtlAwareSerializerSnapshot",
        "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot",
        "org.apache.flink.runtime.state.v2.ttl.TtlStateFactory$TtlSerializerSnapshot",
        "org.apache.flink.streaming.api.datastream.CoGroupedStreams$UnionSerializerSnapshot",
        "org.apache.flink.streaming.api.functions.sink.legacy.TwoPhaseCommitSinkFunction"
        "$StateSerializerSnapshot",
        "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot",
        "org.apache.flink.streaming.api.operators.co.IntervalJoinOperator$BufferEntrySerializerSnapshot",
        "org.apache.flink.streaming.api.utils.ByteArrayWrapperSerializer$ByteArrayWrapperSerializerSnapshot",
        "org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer"
        "$GlobalWindowSerializerSnapshot",
        "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot",
        "org.apache.flink.streaming.runtime.streamrecord.StreamElementSerializer"
        "$StreamElementSerializerSnapshot",
        "org.apache.flink.table.dataview.ListViewSerializerSnapshot",
        "org.apache.flink.table.dataview.MapViewSerializerSnapshot",
        "org.apache.flink.table.dataview.NullAwareMapSerializerSnapshot",
        "org.apache.flink.table.dataview.NullSerializer$NullSerializerSnapshot",
        "org.apache.flink.table.runtime.operators.sink.SortedLongSerializer$SortedLongSerializerSnapshot",
        "org.apache.flink.table.runtime.operators.window.CountWindow$Serializer"
        "$CountWindowSerializerSnapshot",
        "org.apache.flink.table.runtime.operators.window.GlobalWindow$Serializer"
        "$GlobalWindowSerializerSnapshot",
        "org.apache.flink.table.runtime.operators.window.TimeWindow$Serializer$TimeWindowSerializerSnapshot",
        "org.apache.flink.table.runtime.sequencedmultisetstate.linked.MetaSqnInfoSerializer"
        "$MetaSqnInfoSerializerSnapshot",
        "org.apache.flink.table.runtime.sequencedmultisetstate.linked.NodeSerializer$NodeSerializerSnapshot",
        "org.apache.flink.table.runtime.sequencedmultisetstate.linked.RowDataKeySerializerSnapshot",
        "org.apache.flink.table.runtime.sequencedmultisetstate.linked.RowSqnInfoSerializer"
        "$RowSqnInfoSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.ArrayDataSerializer$ArrayDataSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.BinaryRowDataSerializer$BinaryRowDataSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.DecimalDataSerializer$DecimalSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.ExternalSerializer$ExternalSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.LinkedListSerializer$LinkedListSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.MapDataSerializer$MapDataSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.RawValueDataSerializer$RawValueDataSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.RowDataSerializer$RowDataSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.SortedMapSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.StringDataSerializer$StringDataSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.TimestampDataSerializer$TimestampDataSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.WindowKeySerializer$WindowKeySerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.serializers.python.ArrayDataSerializer"
        "$ArrayDataSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.serializers.python.BigDecSerializer"
        "$BigDecSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.serializers.python.DateSerializer$DateSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.serializers.python.DecimalDataSerializer"
        "$DecimalSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.serializers.python.MapDataSerializer"
        "$BaseMapSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.serializers.python.RowDataSerializer"
        "$RowDataSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.serializers.python.StringSerializer"
        "$StringSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.serializers.python.TimeSerializer$TimeSerializerSnapshot",
        "org.apache.flink.table.runtime.typeutils.serializers.python.TimestampSerializer"
        "$TimestampSerializerSnapshot",
    )
)


@lru_cache(maxsize=1024)
def near_miss(class_name: str) -> str | None:
    """Return the Flink class ``class_name`` is one edit away from, if it is not a listed class itself."""
    if class_name in FLINK_SERIALIZER_SNAPSHOTS:
        return None
    n = len(class_name)
    for length in (n, n - 1, n + 1):
        for known in _BY_LENGTH.get(length, ()):
            if _one_edit(class_name, known):
                return known
    return None


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by exactly one substituted, inserted or deleted character."""
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = next((i for i, (x, y) in enumerate(zip(short, long, strict=False)) if x != y), len(short))
    return short[i:] == long[i + 1 :]


def _by_length() -> dict[int, tuple[str, ...]]:
    out: dict[int, list[str]] = {}
    for name in sorted(FLINK_SERIALIZER_SNAPSHOTS):
        out.setdefault(len(name), []).append(name)
    return {n: tuple(v) for n, v in out.items()}


_BY_LENGTH = _by_length()

__all__ = ["FLINK_SERIALIZER_SNAPSHOTS", "near_miss"]
