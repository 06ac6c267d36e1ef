"""Writing savepoints: what a rescale or a migration writes, and the commit.

Rescaled operator state, regrouped key groups, read and write tasks over keyed files, raw-state timers,
NATIVE databases, finished operators, and ``commit`` (``_metadata`` last).
"""
