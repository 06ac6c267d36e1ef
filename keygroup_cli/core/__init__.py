"""The core: key-group math, hashing, keys, errors, findings, the Arrow schemas and progress. Imports nothing else of kg's."""
