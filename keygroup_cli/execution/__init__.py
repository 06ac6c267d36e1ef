"""Execution: running what was planned.

``routes/`` (one per command family: open, gate, plan, run, commit), ``jobs/`` (the task model and the
plans compiled into it), ``engines/`` (local and Spark), ``options`` (how a rescale runs), and
``environment`` (what kg runs on, for ``kg doctor``).
"""
