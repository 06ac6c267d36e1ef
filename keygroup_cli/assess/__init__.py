"""Assessment: the gate on any input, the restore checks, the upgrade gate, key-group sizes and operator matching."""
