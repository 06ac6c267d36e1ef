"""State as data: typed Arrow tables, one key's value, Parquet export and connector state."""
