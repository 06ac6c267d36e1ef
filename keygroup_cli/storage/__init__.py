"""One storage layer for local paths and object stores (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``).

``locations`` names files and reads them (whole, or by range); ``transfer`` moves many files with bounded
concurrency and retries and commits an upload with its metadata file last; ``remote`` runs kg's
file-based commands on an object store: inputs are read where they are (metadata) or downloaded into a
scratch directory (a rescale reads every byte anyway), outputs are written locally, verified, and
uploaded with the metadata-last commit.
"""

from __future__ import annotations

from keygroup_cli.storage.locations import Location, is_remote, is_uri, location

__all__ = ["Location", "is_remote", "is_uri", "location"]
