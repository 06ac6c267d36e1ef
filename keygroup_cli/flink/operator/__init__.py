"""The operator (non-keyed) state codec."""
