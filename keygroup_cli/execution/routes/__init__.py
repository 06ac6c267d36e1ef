"""Routes: one per command family, each the same spine.

Open the input once, gate it, plan on the driver, run the tasks on an engine, commit on the driver.
"""
