"""Count the repeated work of one ``kg rescale`` of a Flink savepoint (issue #21's "measured").

For one rescale (local engine) of a real Flink savepoint, counts, by wrapping kg's own functions in
this process:

- ``_metadata`` files opened for reading (input and output apart, by path);
- ``_metadata`` parses (``flink.metadata.parse_metadata``) and encodes (``metadata_writer.write_metadata``);
- keyed and operator-state header parses (``read_keyed_header`` / ``read_operator_header``), per stream;
- operator-state stream decodes (``decode_operator_file``), per stream;
- ``StreamSource`` opens.

    .venv/bin/python benchmarks/spine_counts.py [SAVEPOINT] [--to 4] [-m 1024]

Prints one table; the one-spine target is 1 for each "per" figure. Nothing here asserts: the numbers go
into docs/performance.md.
"""

from __future__ import annotations

import argparse
import builtins
import collections
import functools
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from keygroup_cli.execution.routes.rescale import rescale  # noqa: E402

COUNTS: collections.Counter[str] = collections.Counter()
PER: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)


def _patch_everywhere(original: Callable[..., Any], wrapper: Callable[..., Any]) -> None:
    """Replace ``original`` by ``wrapper`` in every loaded kg module that holds it by name."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("keygroup_cli") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                setattr(module, attr, wrapper)


def _counting(module: str, name: str, label: str, key: Callable[..., str] | None = None) -> None:
    mod = sys.modules[module]
    original = getattr(mod, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        COUNTS[label] += 1
        if key is not None:
            PER[label][key(*args, **kwargs)] += 1
        return original(*args, **kwargs)

    _patch_everywhere(original, wrapper)


def _install() -> None:
    import keygroup_cli.execution.routes.savepoint  # noqa: F401  (loads the whole rescale path)
    import keygroup_cli.flink.io.stream_source as stream_source
    import keygroup_cli.flink.keyed.header  # noqa: F401
    import keygroup_cli.flink.metadata.reader  # noqa: F401
    import keygroup_cli.flink.metadata.writer  # noqa: F401
    import keygroup_cli.flink.operator.codec  # noqa: F401

    _counting("keygroup_cli.flink.metadata.reader", "parse_metadata", "_metadata parsed")
    _counting("keygroup_cli.flink.metadata.writer", "write_metadata", "_metadata encoded")
    _counting(
        "keygroup_cli.flink.keyed.header",
        "read_keyed_header",
        "keyed header parsed",
        key=lambda data, source, *a, **k: str(source),
    )
    _counting(
        "keygroup_cli.flink.keyed.header",
        "read_operator_header",
        "operator header parsed",
        key=lambda data, source, *a, **k: str(source),
    )
    _counting(
        "keygroup_cli.flink.operator.codec",
        "decode_operator_file",
        "operator stream decoded",
        key=lambda src, handle, *a, **k: str(
            getattr(getattr(handle, "delegate", handle), "relative_path", handle)
        ),
    )
    init = stream_source.StreamSource.__init__

    @functools.wraps(init)
    def counted_init(self: Any, *args: Any, **kwargs: Any) -> None:
        COUNTS["StreamSource opened"] += 1
        init(self, *args, **kwargs)

    stream_source.StreamSource.__init__ = counted_init  # type: ignore[method-assign]
    opener = builtins.open

    def counted_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        path = str(file)
        if (
            path.endswith("_metadata")
            and (not args or "r" in str(args[0]))
            and "w" not in str(kwargs.get("mode", ""))
        ):
            PER["_metadata read from storage"][path] += 1
        return opener(file, *args, **kwargs)

    builtins.open = counted_open
    read_bytes = Path.read_bytes

    def counted_read_bytes(self: Path) -> bytes:
        if self.name == "_metadata":
            PER["_metadata read from storage"][str(self)] += 1
        return read_bytes(self)

    Path.read_bytes = counted_read_bytes  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "savepoint", nargs="?", default=str(ROOT / "fixtures/flink/2.3/rocksdb-canonical-p3-maxp128-string")
    )
    parser.add_argument("--to", type=int, default=4)
    parser.add_argument("-m", "--max-parallelism", type=int, default=1024)
    args = parser.parse_args()
    _install()
    out = Path(tempfile.mkdtemp(prefix="kg-spine-")) / "out"
    try:
        rescale(args.savepoint, out, args.to, new_max_parallelism=args.max_parallelism, engine="local")
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    print(f"kg rescale {args.savepoint} --to {args.to} -m {args.max_parallelism} --engine local")
    print(f"{'what':32} {'total':>6} {'streams':>8} {'per stream (max)':>17}")
    labels = sorted(set(COUNTS) | set(PER))
    for label in labels:
        per = PER.get(label)
        total = COUNTS.get(label, sum(per.values()) if per else 0)
        streams = len(per) if per else "-"
        most = max(per.values()) if per else "-"
        print(f"{label:32} {total:>6} {streams!s:>8} {most!s:>17}")


if __name__ == "__main__":
    main()
