"""The checks: deep verification of a savepoint, operator-state streams, and the files ``_metadata`` names."""
