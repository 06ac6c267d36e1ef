"""Backend layouts kg reads by rewriting them into the canonical one: heap (HashMap) and RocksDB's own."""
