"""Routes: open the input once, gate it, plan, run the tasks on an engine, commit. One route per command family."""
