# The C extension `proxy/capture/_snapped.c` (built by setup.py), for the type checker.
def build(
    template: bytes, leg: int, ts_ns: int, seq: int, ack: int, data: bytes, whole: bool, captured: int, /
) -> tuple[bytes, int]: ...
def append_run(
    sink: bytearray,
    conn: int,
    ts_ns: int,
    request: bool,
    kind: bool,
    data: bytes | bytearray,
    start: int,
    end: int,
    /,
) -> None: ...
