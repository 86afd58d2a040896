# The C extension `proxy/capture/_snapped.c` (built by setup.py), for the type checker.
def build(
    template: bytes, leg: int, ts_ns: int, seq: int, ack: int, data: bytes, whole: bool, captured: int, /
) -> tuple[bytes, int]: ...
def build_runs(
    packed: bytes,
    start: int,
    streams: dict[int, tuple[object, object]],
    request_captured: int,
    response_captured: int,
    /,
) -> tuple[bytes, int, int, str | None]: ...

# (conn, ts_ns, request, kind, data, start, end): `proxy.header_runs.python_append_run`'s, typed there
def append_run(sink: bytearray, /, *run: int | bool | bytes | bytearray) -> None: ...
def append_heads(
    sink: bytearray, conn: int, ts_ns: int, request: bool, data: bytes | bytearray, start: int, end: int, /
) -> None: ...
