"""A chunk upload's plain file data from the socket to the chunk's file without the GIL (``_pump.c``): what
:func:`dockyard_api.server._read_raw` calls where it was built."""

from typing import Any

DONE: int
PIECE: int
CLOSED: int
SILENT: int
SOCKET_ERROR: int
WRITE_ERROR: int

def pump(
    sock: int,
    buffer: Any,
    left: int,
    file: int,
    offset: int,
    room: int,
    delimiter: bytes,
    advise: bool,
    timeout_ms: int,
    /,
) -> tuple[int, int, int, int, int]: ...
def plain(piece: Any, delimiter: bytes, /) -> bool: ...
