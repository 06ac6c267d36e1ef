"""kg: inspect, check and rescale the keyed state of Apache Flink jobs."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
