"""``kg compact --keep-where/--drop-where``: a small predicate on key columns, compiled to pyarrow.compute.

The text is parsed, never evaluated: a tokenizer and a recursive-descent parser turn it into a
``pyarrow.compute.Expression`` over the decoded key (a column ``key``; ``key.f`` names field ``f`` of a
struct key, such as a Tuple, POJO or SQL row key). Grammar (keywords in any case)::

    expr    := and (OR and)*
    and     := not (AND not)*
    not     := NOT not | '(' expr ')' | test
    test    := column ('=' | '!=' | '<>' | '<' | '<=' | '>' | '>=') literal
             | column [NOT] LIKE 'pattern'          -- SQL LIKE: % any run, _ one character
             | column [NOT] IN (literal, ...)
             | column [NOT] IN FILE 'path'          -- one key a line; or .parquet/.arrow with a key column
             | column [NOT] BETWEEN literal AND literal
             | column IS [NOT] NULL
    literal := 'text' (a '' inside is one quote) | number | TRUE | FALSE

Literals take the column's type (``key >= 10`` on a Long key compares longs); a literal that does not fit it
is a usage error. As in SQL, a test on a null is not true.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.planning.state_edit import read_data

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
    r"|(?P<op><=|>=|<>|!=|=|<|>|\(|\)|,)|(?P<word>[A-Za-z_][A-Za-z0-9_.]*))"
)
_KEYWORDS = {"AND", "OR", "NOT", "LIKE", "IN", "FILE", "BETWEEN", "IS", "NULL", "TRUE", "FALSE"}
_COMPARE = {"=": pc.equal, "!=": pc.not_equal, "<>": pc.not_equal, "<": pc.less, "<=": pc.less_equal}
_COMPARE |= {">": pc.greater, ">=": pc.greater_equal}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str
    at: int


def _error(text: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"key predicate {text!r}: {message}", code="WHERE_INVALID")


def _tokens(text: str) -> list[_Token]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise _error(text, f"unexpected {text[pos:].strip()[:12]!r} at {pos}")
        kind = match.lastgroup or ""
        value, at = match.group(kind), match.start(kind)
        if kind == "word" and value.upper() in _KEYWORDS:
            kind, value = "kw", value.upper()
        out.append(_Token(kind, value, at))
        pos = match.end()
    return out


class _Parser:
    def __init__(self, text: str, key_type: pa.DataType, base: Path | None) -> None:
        self.text, self.key_type, self.base = text, key_type, base
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self, *kinds: str) -> _Token | None:
        if self.pos < len(self.tokens):
            token = self.tokens[self.pos]
            if not kinds or token.kind in kinds or token.text in kinds:
                return token
        return None

    def take(self, *kinds: str) -> _Token:
        token = self.peek(*kinds)
        if token is None:
            found = self.tokens[self.pos].text if self.pos < len(self.tokens) else "the end"
            raise _error(self.text, f"expected {' or '.join(kinds)}, found {found!r}")
        self.pos += 1
        return token

    def accept(self, word: str) -> bool:
        if self.peek(word) is not None:
            self.pos += 1
            return True
        return False

    def parse(self) -> pc.Expression:
        if not self.tokens:
            raise _error(self.text, "empty predicate")
        expr = self.expr()
        if self.pos != len(self.tokens):
            raise _error(self.text, f"unexpected {self.tokens[self.pos].text!r}")
        return expr

    def expr(self) -> pc.Expression:
        left = self.conjunction()
        while self.accept("OR"):
            left = left | self.conjunction()
        return left

    def conjunction(self) -> pc.Expression:
        left = self.negation()
        while self.accept("AND"):
            left = left & self.negation()
        return left

    def negation(self) -> pc.Expression:
        if self.accept("NOT"):
            return ~self.negation()
        if self.accept("("):
            inner = self.expr()
            self.take(")")
            return inner
        return self.test()

    def test(self) -> pc.Expression:
        name = self.take("word").text
        field, kind = self.column(name)
        if self.accept("IS"):
            negated = self.accept("NOT")
            self.take("NULL")
            test = pc.is_null(field)
            return ~test if negated else test
        negated = self.accept("NOT")
        if self.accept("LIKE"):
            pattern = self.literal(pa.string())
            if not pa.types.is_string(kind) and not pa.types.is_large_string(kind):
                raise _error(self.text, f"LIKE needs a text column; {name} is {kind}")
            test = pc.match_like(field, pattern=pattern)
        elif self.accept("IN"):
            test = pc.is_in(field, value_set=self.value_set(kind))
        elif self.accept("BETWEEN"):
            low = self.literal(kind)
            self.take("AND")
            test = (field >= pa.scalar(low, kind)) & (field <= pa.scalar(self.literal(kind), kind))
        else:
            if negated:
                raise _error(self.text, "NOT goes before LIKE, IN or BETWEEN here")
            op = self.take("op").text
            if op not in _COMPARE:
                raise _error(self.text, f"{op!r} is not a comparison")
            return _COMPARE[op](field, pa.scalar(self.literal(kind), kind))
        return ~test if negated else test

    def column(self, name: str) -> tuple[pc.Expression, pa.DataType]:
        parts = name.split(".")
        if parts[0] != "key":
            raise _error(
                self.text, f"unknown column {parts[0]!r}: predicates are on the key (key, key.field)"
            )
        kind = self.key_type
        for part in parts[1:]:
            if not pa.types.is_struct(kind) or kind.get_field_index(part) < 0:
                raise _error(self.text, f"the key has no field {part!r} (key type {self.key_type})")
            kind = kind.field(part).type
        return pc.field(*parts) if len(parts) > 1 else pc.field("key"), kind

    def literal(self, kind: pa.DataType) -> Any:
        token = self.take("str", "num", "TRUE", "FALSE")
        if token.kind == "str":
            value: Any = token.text[1:-1].replace("''", "'")
        elif token.kind == "num":
            value = float(token.text) if any(c in token.text for c in ".eE") else int(token.text)
        else:
            value = token.text == "TRUE"
        return _cast(self.text, value, kind)

    def value_set(self, kind: pa.DataType) -> pa.Array:
        if self.accept("FILE"):
            path = Path(self.take("str").text[1:-1].replace("''", "'"))
            if not path.is_absolute() and self.base is not None:
                path = self.base / path
            return keys_from_file(path, kind)
        self.take("(")
        values = [self.literal(kind)]
        while self.accept(","):
            values.append(self.literal(kind))
        self.take(")")
        return pa.array(values, type=kind)


def _cast(text: str, value: Any, kind: pa.DataType) -> Any:
    """Return ``value`` as a Python value of Arrow type ``kind`` (a usage error if it does not fit)."""
    try:
        scalar = pa.scalar(value).cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError) as exc:
        raise _error(text, f"{value!r} is not a {kind} ({exc})") from None
    return scalar.as_py()


def keys_from_file(path: Path, kind: pa.DataType) -> pa.Array:
    """Return the keys listed in ``path`` as ``kind``: a ``key`` column of a Parquet/Arrow file, or lines.

    Raises:
        InvalidArgumentError: The file cannot be read, or a key does not fit ``kind``.
    """
    try:
        if path.suffix in (".parquet", ".pq", ".arrow", ".feather", ".ipc"):
            column = read_data(str(path)).column("key")
        else:
            lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line != ""]
            column = pa.chunked_array([pa.array(lines, type=pa.string())])
        return column.combine_chunks().cast(kind)
    except (OSError, KeyError) as exc:
        raise InvalidArgumentError(f"{path}: cannot read keys ({exc})", code="WHERE_INVALID") from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidArgumentError(f"{path}: a key is not a {kind} ({exc})", code="WHERE_INVALID") from None


def compile_predicate(text: str, key_type: pa.DataType, base: Path | None = None) -> pc.Expression:
    """Return ``text`` (grammar: module docstring) as an expression over a table with a ``key`` column.

    ``key_type`` is the decoded key's Arrow type; ``base`` resolves a relative ``IN FILE`` path.

    Raises:
        InvalidArgumentError: ``WHERE_INVALID``: the text does not parse, names an unknown column, or a
            literal does not fit the column's type.
    """
    return _Parser(text, key_type, base).parse()


__all__ = ["compile_predicate", "keys_from_file"]
