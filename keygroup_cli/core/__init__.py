"""The core: what every other layer builds on, importing nothing else of kg's.

Key-group math, Java hash codes, keys, errors and exit codes, findings, the Arrow schemas both formats
share, progress, kg's cache directory, worker threads and allocator settings.
"""
