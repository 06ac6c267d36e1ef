"""Flink's serializers and the values they write.

The byte codecs, typed values, Avro, ``BinaryRowData``, the serializer-snapshot grammar both state
headers are written in (``snapshots``), and the serializer classes Flink ships (``classes``).
"""
