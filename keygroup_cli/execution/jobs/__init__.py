"""Jobs: a plan compiled into the task model both engines run (read tasks, a shuffle, write tasks)."""
