"""Click commands of kg, one module per command (loaded lazily by ``keygroup_cli.cli``)."""
