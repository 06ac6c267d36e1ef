"""Big-endian primitive reading and writing with Java ``DataInput`` / ``DataOutput`` semantics.

Mirrors ``java.io.DataInputStream`` / ``DataOutputStream`` (and Flink's ``DataInputView``): every integer
is big-endian two's complement, booleans are one byte, and strings are ``writeUTF``'s *modified* UTF-8
with an unsigned 16-bit byte length. Running past the end of the buffer raises ``InvalidInputError``
naming the source and the offset, so callers never see ``struct.error`` or ``IndexError``.
"""

from __future__ import annotations

import struct

from keygroup_cli.core.errors import InvalidInputError

_INT = struct.Struct(">i")
_UINT = struct.Struct(">I")
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_USHORT = struct.Struct(">H")


def decode_modified_utf8(raw: bytes) -> str:
    """Decode Java modified UTF-8 (``DataInputStream.readUTF`` without the length).

    NUL is ``C0 80`` and a supplementary character is two 3-byte surrogates; both are folded back into a
    normal Python string. Raises ``ValueError`` on bytes Java's decoder would reject.
    """
    if raw.isascii():
        if b"\x00" in raw:
            raise ValueError("NUL byte in modified UTF-8")
        return raw.decode("ascii")
    # 4-byte forms never occur in modified UTF-8 (``readUTF`` throws UTFDataFormatException on them).
    if any(b >= 0xF0 for b in raw):
        raise ValueError("4-byte sequence in modified UTF-8")
    text = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        # Pair up surrogates; lone ones are legal in Java strings and survive via surrogatepass.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text


def encode_modified_utf8(text: str) -> bytes:
    """Encode ``text`` exactly as ``DataOutputStream.writeUTF`` does (without the length prefix)."""
    if text.isascii() and "\x00" not in text:
        return text.encode("ascii")
    out = bytearray()
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        c = (units[i] << 8) | units[i + 1]
        if 0x0001 <= c <= 0x007F:
            out.append(c)
        elif c <= 0x07FF:
            out += bytes((0xC0 | (c >> 6), 0x80 | (c & 0x3F)))
        else:
            out += bytes((0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)))
    return bytes(out)


class DataInput:
    """A cursor over bytes that reads Java ``DataInput`` primitives.

    Args:
        data: The bytes to read.
        source: What the bytes are (a file path), used in error messages.
        base: The absolute offset of ``data[0]`` in the source, so messages report file offsets.
    """

    __slots__ = ("_data", "_view", "pos", "source", "base")

    def __init__(self, data: bytes, source: str = "<bytes>", base: int = 0) -> None:
        self._data = data
        self._view = memoryview(data)
        self.pos = 0
        self.source = source
        self.base = base

    @property
    def remaining(self) -> int:
        """Return how many bytes are left."""
        return len(self._data) - self.pos

    def at_end(self) -> bool:
        """Return whether every byte has been read."""
        return self.pos >= len(self._data)

    def _need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > len(self._data):
            raise InvalidInputError(
                f"{self.source}: truncated or corrupt at byte {self.base + pos} "
                f"(needed {n} bytes, {len(self._data) - pos} left)",
                code="FLINK_TRUNCATED",
            )
        self.pos = pos + n
        return pos

    def read_int(self) -> int:
        """Read a signed 32-bit int (``readInt``)."""
        value: int = _INT.unpack_from(self._data, self._need(4))[0]
        return value

    def read_uint(self) -> int:
        """Read an unsigned 32-bit int (for magic numbers printed in hex)."""
        value: int = _UINT.unpack_from(self._data, self._need(4))[0]
        return value

    def read_long(self) -> int:
        """Read a signed 64-bit long (``readLong``)."""
        value: int = _LONG.unpack_from(self._data, self._need(8))[0]
        return value

    def read_short(self) -> int:
        """Read a signed 16-bit short (``readShort``)."""
        value: int = _SHORT.unpack_from(self._data, self._need(2))[0]
        return value

    def read_unsigned_short(self) -> int:
        """Read an unsigned 16-bit short (``readUnsignedShort``)."""
        value: int = _USHORT.unpack_from(self._data, self._need(2))[0]
        return value

    def read_byte(self) -> int:
        """Read a signed byte (``readByte``)."""
        b = self._data[self._need(1)]
        return b - 256 if b >= 128 else b

    def read_unsigned_byte(self) -> int:
        """Read an unsigned byte (``read()`` / ``readUnsignedByte``)."""
        return self._data[self._need(1)]

    def read_bool(self) -> bool:
        """Read a boolean: any non-zero byte is true (``readBoolean``)."""
        return self._data[self._need(1)] != 0

    def read_bytes(self, n: int) -> bytes:
        """Read exactly ``n`` bytes (``readFully``)."""
        start = self._need(n)
        return bytes(self._view[start : start + n])

    def read_longs(self, n: int) -> tuple[int, ...]:
        """Read ``n`` longs at once (offset arrays)."""
        if n < 0:
            self._need(-1)
        start = self._need(8 * n)
        return struct.unpack_from(f">{n}q", self._data, start)

    def read_utf(self) -> str:
        """Read a ``writeUTF`` string: unsigned short byte length, then modified UTF-8."""
        start = self.pos
        raw = self.read_bytes(self.read_unsigned_short())
        try:
            return decode_modified_utf8(raw)
        except ValueError as exc:
            raise InvalidInputError(
                f"{self.source}: malformed modified UTF-8 string at byte {self.base + start}: {exc}",
                code="FLINK_MALFORMED_STRING",
            ) from None

    def slice(self, start: int, end: int) -> bytes:
        """Return the bytes ``[start, end)`` of the buffer without moving the cursor."""
        return bytes(self._view[start:end])


class DataOutput:
    """An append-only buffer that writes Java ``DataOutput`` primitives (the inverse of ``DataInput``)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def getvalue(self) -> bytes:
        """Return everything written so far."""
        return bytes(self._buf)

    def __len__(self) -> int:
        return len(self._buf)

    def write_int(self, value: int) -> None:
        """Write a signed 32-bit int."""
        self._buf += _INT.pack(value)

    def write_uint(self, value: int) -> None:
        """Write an unsigned 32-bit int (magic numbers)."""
        self._buf += _UINT.pack(value)

    def write_long(self, value: int) -> None:
        """Write a signed 64-bit long."""
        self._buf += _LONG.pack(value)

    def write_longs(self, values: tuple[int, ...] | list[int]) -> None:
        """Write many longs at once."""
        self._buf += struct.pack(f">{len(values)}q", *values)

    def write_short(self, value: int) -> None:
        """Write a 16-bit short (signed or unsigned range)."""
        self._buf += _USHORT.pack(value & 0xFFFF)

    def write_byte(self, value: int) -> None:
        """Write one byte (signed or unsigned range)."""
        self._buf.append(value & 0xFF)

    def write_bool(self, value: bool) -> None:
        """Write a boolean as one byte."""
        self._buf.append(1 if value else 0)

    def write_bytes(self, data: bytes) -> None:
        """Write raw bytes."""
        self._buf += data

    def write_utf(self, text: str) -> None:
        """Write a ``writeUTF`` string; more than 65535 encoded bytes is an error, as in Java."""
        raw = encode_modified_utf8(text)
        if len(raw) > 0xFFFF:
            raise ValueError(f"encoded string too long: {len(raw)} bytes")
        self._buf += _USHORT.pack(len(raw))
        self._buf += raw
