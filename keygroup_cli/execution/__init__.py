"""Execution: the routes (one per command family), the jobs a plan compiles into, and the engines that run them."""
