"""What a GGUF file says it is: ``general.type`` of its key-value header ("model", or "adapter" for a LoRA
that llama.cpp loads with ``--lora``), read without loading tensors (the rule of step 3 in
:mod:`dockyard_operator.importing`).

GGUF v2/v3 header: magic ``GGUF``, uint32 version, uint64 tensor count, uint64 key-value count, then each
key (uint64 length + UTF-8) with a uint32 value type and its value. Every length is checked against the
file's size, so a damaged or hostile header cannot make the reader allocate or loop without bound.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
"""Value type → size in bytes (uint8 … float64; 8 is a string, 9 an array)."""
_STRING, _ARRAY = 8, 9
MAX_KEYS = 4096
MAX_KEY_BYTES = 65536


class _Bad(Exception):
    pass


class _Reader:
    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f, self.size = f, size

    def take(self, n: int) -> bytes:
        if n < 0 or self.f.tell() + n > self.size:
            raise _Bad
        return self.f.read(n)

    def skip(self, n: int) -> None:
        if n < 0 or self.f.tell() + n > self.size:
            raise _Bad
        self.f.seek(n, 1)

    def u32(self) -> int:
        value: int = struct.unpack("<I", self.take(4))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack("<Q", self.take(8))[0]
        return value

    def string(self) -> bytes:
        return self.take(self.u64())

    def skip_value(self, kind: int) -> None:
        if kind in _FIXED:
            self.skip(_FIXED[kind])
        elif kind == _STRING:
            self.skip(self.u64())
        elif kind == _ARRAY:
            item, count = self.u32(), self.u64()
            if item in _FIXED:
                self.skip(_FIXED[item] * count)
            elif item == _STRING:
                if count > self.size:
                    raise _Bad
                for _ in range(count):
                    self.skip(self.u64())
            else:
                raise _Bad  # nested arrays: not in llama.cpp's files
        else:
            raise _Bad


def gguf_type(path: Path) -> str | None:
    """``general.type`` of the GGUF file at ``path``; None when the header has none or cannot be read."""
    try:
        with path.open("rb") as f:
            reader = _Reader(f, path.stat().st_size)
            if reader.take(4) != b"GGUF" or reader.u32() not in (2, 3):
                return None
            reader.u64()  # tensors
            for _ in range(min(reader.u64(), MAX_KEYS)):
                length = reader.u64()
                if length > MAX_KEY_BYTES:
                    return None
                key, kind = reader.take(length), reader.u32()
                if key == b"general.type" and kind == _STRING:
                    return reader.string().decode("utf-8", "replace")
                reader.skip_value(kind)
    except (_Bad, OSError, struct.error):
        return None
    return None
