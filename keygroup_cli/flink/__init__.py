"""Read and write Apache Flink savepoints and checkpoints without a JVM, split by concern.

- ``metadata/``: the ``_metadata`` file: where it is (``locate``), its handles, reader and writer;
- ``io/``: bytes: Java data streams, snappy, the stream sources handles open, and the paths they resolve to;
- ``state/``: the codecs: serializers, keyed headers, key-group blocks, operator state;
- ``layouts/``: heap and RocksDB layouts, rewritten as canonical key groups;
- beside them, what works on a whole savepoint: tasks, regrouping, the state-file gate, verification.

Every reader takes an object-store URI as well (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``; see
``keygroup_cli.storage``): paths are then ``Location`` objects, and reads are ranged requests.
"""
