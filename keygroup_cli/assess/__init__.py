"""Assessment: judging an input without changing it.

The gate on any input (``integrity``), the format-neutral summary, ``kg check``'s restore checks
(``restore``), the upgrade gate, key-group sizes and operator matching.
"""
