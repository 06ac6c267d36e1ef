"""Flink's serializers and values: the byte codecs, typed values, Avro, BinaryRowData and the serializer classes."""
