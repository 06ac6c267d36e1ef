"""Byte-level I/O of Flink state.

Java data streams (``binary``), snappy framing (``snappy``), the stream sources state handles open
(``stream_source``), and the paths handles resolve to (``paths``).
"""
