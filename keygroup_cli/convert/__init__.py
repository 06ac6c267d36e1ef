"""The bridges between Flink savepoints and kg snapshots: the only package that imports both formats."""
