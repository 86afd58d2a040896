"""The C builder of header-only packets (`proxy/capture/_snapped.c`) against the Python one it
replaces in the writer process (`proxy.capture.snapped.python_run_blocks`, the reference): the
same bytes and the same next sequence numbers on both legs, for random runs; malformed runs
refused; the Python one chosen when asked for. The same for the proxy's packing of a run onto
`header_runs` (`append_run` against `proxy.header_runs.python_append_run`, `append_heads` against
`python_append_heads`).

Without the extension built (a source tree run with PYTHONPATH, before `python setup.py
build_ext --inplace`) these tests skip, saying so; `pip install -e .` builds it (a missing
compiler fails the install).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy import header_runs
from proxy.capture import snapped
from proxy.capture.packets import Synthesizer
from proxy.capture.tcp import MAX_SEGMENT, Stream, new_stream
from proxy.layouts import CLOSE, HEADER_RUN, OPEN

ROOT = Path(__file__).resolve().parents[1]

try:
    from proxy.capture._snapped import append_heads, append_run, build
except ImportError:  # pragma: no cover - depends on the tree having been built
    append_heads = append_run = build = None

pytestmark = pytest.mark.skipif(
    build is None, reason="proxy.capture._snapped is not built (python setup.py build_ext --inplace)"
)

REQUEST = struct.Struct(">ihhi")
RESPONSE = struct.Struct(">ii")


def _frame(to_server: bool, size: int, correlation_id: int, whole: bool) -> bytes:
    """A frame of `size` bytes after its size prefix (whole) or its head only."""
    head = REQUEST.pack(size, 0, 7, correlation_id) if to_server else RESPONSE.pack(size, correlation_id)
    if not whole:
        return head
    return head + bytes((correlation_id + i) & 0xFF for i in range(size + 4 - len(head)))


def _streams(seq: int, other: int) -> tuple[Stream, Stream]:
    client, upstream = new_stream(70_000, 0, 0), new_stream(70_000, 1, 3)
    client.client_seq, client.server_seq = seq, other
    upstream.client_seq, upstream.server_seq = seq + 1_000, other + 2_000
    return client, upstream


def _both(to_server: bool, ts_ns: int, data: bytes, whole: bool, seq: int, other: int) -> list[object]:
    """What each builder writes and leaves in the streams, from the same state."""
    written: list[object] = []
    for builder in (snapped.python_run_blocks, snapped.native_run_blocks):
        client, upstream = _streams(seq, other)
        blocks = bytes(builder(client, upstream, to_server, ts_ns, data, whole))
        written.append(
            (blocks, client.client_seq, client.server_seq, upstream.client_seq, upstream.server_seq)
        )
    return written


_SMALL = st.integers(min_value=8, max_value=400)  # what goes whole (sizes even and odd)
_BIG = st.integers(min_value=MAX_SEGMENT - 8, max_value=3 * MAX_SEGMENT + 5)  # several packets
_SEQ = st.one_of(
    st.integers(min_value=0, max_value=1 << 34),  # a stream's sequence number is not masked
    st.integers(min_value=(1 << 32) - 300_000, max_value=(1 << 32) - 1),  # wrapping inside the run
)


@st.composite
def _runs(draw: st.DrawFn) -> tuple[bool, int, bytes, bool, int, int]:
    to_server = draw(st.booleans())
    whole = draw(st.booleans())
    count = draw(st.integers(min_value=1, max_value=70))  # the proxy hands over no empty run
    sizes_from = _SMALL if whole else st.one_of(_SMALL, _BIG, st.integers(0, 8))
    if draw(st.booleans()):  # all one size (a pipelining client): the lanes, or one stride
        sizes = [draw(sizes_from)] * count
    else:
        sizes = draw(st.lists(sizes_from, min_size=count, max_size=count))
    if whole:  # the frames hold at least their captured head (a request's 12 bytes)
        sizes = [max(size, 8 if to_server else 4) for size in sizes]
    data = b"".join(_frame(to_server, size, i, whole) for i, size in enumerate(sizes))
    ts_ns = draw(st.one_of(st.integers(0, (1 << 63) - 1), st.just(1_764_000_000_123_456_789)))
    return to_server, ts_ns, data, whole, draw(_SEQ), draw(_SEQ)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_runs())
def test_c_writes_what_python_writes(run: tuple[bool, int, bytes, bool, int, int]) -> None:
    python, native = _both(*run)
    assert native == python


@pytest.mark.parametrize("size", [96, 97, 70_000, (1 << 31) - 1])
@pytest.mark.parametrize("to_server", [True, False])
def test_c_writes_what_python_writes_across_the_wrap(size: int, to_server: bool) -> None:
    """Runs of equal sizes (Python's lanes from 4 frames), odd and even, up to the largest frame
    size (33,039 packets of one frame), the sequence number wrapping past 2**32 inside the run."""
    count = 1 if size > 1 << 20 else 40
    data = b"".join(_frame(to_server, size, i, False) for i in range(count))
    python, native = _both(to_server, 123 << 32 | 456, data, False, (1 << 32) - 10 * (4 + size), 7)
    assert native == python
    assert len(python[0]) > count * 88  # type: ignore[index]


def test_a_synthesizer_batch_writes_the_same_bytes_with_either_builder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Synthesizer.batch` on packed runs of several connections, heads and whole frames."""
    runs = bytearray()
    for i in range(30):
        to_server = i % 3 != 1
        whole = i % 2 == 0
        sizes = [96] * 8 if i % 4 == 0 else [40 + i * 7 % 50, 70_000 + i, 13][: 1 + i % 3]
        if whole:
            sizes = [min(size, 300) for size in sizes]
        data = b"".join(_frame(to_server, size, i * 10 + j, whole) for j, size in enumerate(sizes))
        runs += HEADER_RUN.pack(1 + i % 3, 1_000 + i, len(data) if to_server else -len(data), whole) + data
    batches = [[(OPEN, conn, 1, "127.0.0.1:1", "b:9092") for conn in (1, 2, 3)], [bytes(runs)]] * 2
    written = []
    for builder in (snapped.python_run_blocks, snapped.native_run_blocks):
        monkeypatch.setattr(snapped, "run_blocks", builder)
        synthesizer = Synthesizer()
        written.append(b"".join(bytes(part) for batch in batches for part in synthesizer.batch(batch)))
        assert synthesizer.error is None
    assert written[0] == written[1]
    assert len(written[0]) > 60 * 88


def _packed_run(draw: st.DrawFn, conn: int, index: int) -> bytes:
    """One `HEADER_RUN` + its frames (heads or whole) for `conn`."""
    to_server, whole = draw(st.booleans()), draw(st.booleans())
    sizes = draw(st.lists(st.one_of(_SMALL, _BIG) if not whole else _SMALL, min_size=1, max_size=6))
    if whole:
        sizes = [max(size, 8 if to_server else 4) for size in sizes]
    data = b"".join(_frame(to_server, size, index * 10 + j, whole) for j, size in enumerate(sizes))
    ts_ns = draw(st.integers(0, (1 << 63) - 1))
    return HEADER_RUN.pack(conn, ts_ns, len(data) if to_server else -len(data), whole) + data


@st.composite
def _batches(draw: st.DrawFn) -> list[list[object]]:
    """Batches as the proxy hands them over: connections opened and closed between items of
    packed runs (a connection's first run anywhere in an item, runs of a closed connection
    again), the last run of an item malformed at times."""
    batches: list[list[object]] = []
    for _ in range(draw(st.integers(1, 4))):
        items: list[object] = []
        for _ in range(draw(st.integers(1, 5))):
            match draw(st.sampled_from(["open", "close", "runs", "runs"])):
                case "open":
                    items.append((OPEN, draw(st.integers(1, 4)), 5, "127.0.0.1:1", "b:9092"))
                case "close":
                    items.append((CLOSE, draw(st.integers(1, 4)), 6, "done", 10, 20))
                case _:
                    conns = draw(st.lists(st.integers(1, 4), min_size=1, max_size=8))
                    packed = b"".join(_packed_run(draw, conn, i) for i, conn in enumerate(conns))
                    if draw(st.integers(0, 9)) == 0:  # a run the C and Python builders refuse
                        packed += HEADER_RUN.pack(conns[0], -1, -8, False) + RESPONSE.pack(4, 1)
                    items.append(packed)
        batches.append(items)
    return batches


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(_batches())
def test_the_c_batch_loop_writes_what_the_python_loop_writes(batches: list[list[object]]) -> None:
    """`Synthesizer._header_runs` in one C call per connection first seen
    (`snapped.native_header_runs`) against its Python loop over `python_run_blocks`: the same
    bytes, the same count of bytes written, and a failure at the same run (the blocks before it
    kept, the first error remembered)."""
    written: list[tuple[bytes, int, bool]] = []
    for builder in (snapped.python_run_blocks, snapped.native_run_blocks):
        original = snapped.run_blocks
        snapped.run_blocks = builder
        try:
            synthesizer = Synthesizer()
            blocks = b"".join(bytes(part) for batch in batches for part in synthesizer.batch(batch))
        finally:
            snapped.run_blocks = original
        written.append((blocks, synthesizer.written_bytes, synthesizer.error is not None))
    assert written[1] == written[0]


def test_the_c_batch_loop_names_what_it_refuses() -> None:
    client, upstream = _streams(1, 1)
    good = HEADER_RUN.pack(9, 1, -8, False) + RESPONSE.pack(4, 1)
    for bad, message in (
        (HEADER_RUN.pack(9, -1, -8, False) + RESPONSE.pack(4, 1), "ts_ns >= 0"),
        (HEADER_RUN.pack(9, 1, -9, False) + RESPONSE.pack(4, 1), "runs past the batch"),
        (HEADER_RUN.pack(9, 1, -8, False)[:10], "inside a run's header"),
        (HEADER_RUN.pack(9, 1, -8, False) + RESPONSE.pack(-4, 1), "negative frame size"),
    ):
        blocks, position, count, error = snapped.native_header_runs(good + bad, 0, {9: (client, upstream)})
        assert (position, count) == (len(good), len(good))
        assert error is not None and message in error
        assert len(blocks) == 96  # the good run's one block: 28 + 54 + 8 captured, padded, + 4
    assert snapped.native_header_runs(good, 0, {}) == (b"", 0, 0, None)  # conn 9 not known yet
    with pytest.raises(ValueError, match="outside the batch"):
        snapped.native_header_runs(good, len(good) + 1, {})


@pytest.mark.parametrize(
    ("data", "whole", "captured", "message"),
    [
        (RESPONSE.pack(-1, 5), False, 8, "negative frame size"),
        (RESPONSE.pack(20, 5) + b"\x00" * 3, False, 8, "whole number of heads"),
        (RESPONSE.pack(20, 5) + b"\x00" * 15, True, 8, "runs past the data"),
        (RESPONSE.pack(4, 5) + b"\x00\x00\x00\x04", True, 8, "cut short"),
        (b"", False, 3, "captured 4..64"),
    ],
)
def test_malformed_runs_are_refused(data: bytes, whole: bool, captured: int, message: str) -> None:
    client, _ = _streams(1, 1)
    with pytest.raises(ValueError, match=message):
        build(client.to_client.snapped, 0, 1, 1, 1, data, whole, captured)  # type: ignore[misc]
    with pytest.raises(ValueError, match="54 bytes"):
        build(b"\x00" * 53, 0, 1, 1, 1, RESPONSE.pack(4, 5), False, 8)  # type: ignore[misc]


def test_an_empty_run_writes_nothing() -> None:
    assert _both(True, 5, b"", False, 9, 9)[1] == (b"", 9, 9, 1_009, 2_009)


@pytest.mark.parametrize(
    ("setting", "expected"),
    [("python", ["python_run_blocks", "python_append_run"]), ("", ["native_run_blocks", "append_run"])],
)
def test_the_builder_is_chosen_once_and_logged(setting: str, expected: list[str]) -> None:
    code = (
        "import logging; logging.basicConfig(level=logging.DEBUG, format='%(message)s')\n"
        "from proxy.capture import snapped; print(snapped.run_blocks.__name__)\n"
        "from proxy import header_runs; print(header_runs.append_run.__name__)"
    )
    env = {**os.environ, "GROUP_REPLAY_CAPTURE_BUILDER": setting, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == expected
    builder = "Python" if setting == "python" else "C"
    assert f"header-only packets built by the {builder} builder" in done.stderr


@st.composite
def _appended_runs(draw: st.DrawFn) -> tuple[bytes, int, int, bool, bool, bytes | bytearray, int, int]:
    """What a session packs: after earlier runs, a connection id and timestamp of any size they
    take, either direction and kind, a slice of a read (bytes, or a bytearray: `_header_run`'s)."""
    data = draw(st.binary(max_size=3000))
    start = draw(st.integers(0, len(data)))
    end = draw(st.integers(start, len(data)))
    return (
        draw(st.binary(max_size=200)),
        draw(st.integers(0, (1 << 32) - 1)),
        draw(st.integers(-(1 << 63), (1 << 63) - 1)),
        draw(st.booleans()),
        draw(st.booleans()),
        bytearray(data) if draw(st.booleans()) else data,
        start,
        end,
    )


@settings(max_examples=400)
@given(_appended_runs())
def test_c_packs_a_run_as_python_does(
    run: tuple[bytes, int, int, bool, bool, bytes | bytearray, int, int],
) -> None:
    before, *arguments = run
    python, native = bytearray(before), bytearray(before)
    header_runs.python_append_run(python, *arguments)  # type: ignore[arg-type]
    append_run(native, *arguments)  # type: ignore[misc]
    assert native == python
    assert len(native) == len(before) + HEADER_RUN.size + arguments[-1] - arguments[-2]


def test_c_refuses_what_python_could_not_pack() -> None:
    """A range outside the data, a connection id or timestamp out of HEADER_RUN's range, the sink
    as its own data: an error, and the sink as it was."""
    sink = bytearray(b"kept")
    for start, end in ((-1, 2), (3, 2), (0, 6)):
        with pytest.raises(ValueError, match="not a range of data"):
            append_run(sink, 1, 2, True, True, b"12345", start, end)  # type: ignore[misc]
    with pytest.raises(OverflowError):
        append_run(sink, 1 << 32, 2, True, True, b"12345", 0, 5)  # type: ignore[misc]
    with pytest.raises(OverflowError):
        append_run(sink, -1, 2, True, True, b"12345", 0, 5)  # type: ignore[misc]
    with pytest.raises(OverflowError):
        append_run(sink, 1, 1 << 63, True, True, b"12345", 0, 5)  # type: ignore[misc]
    with pytest.raises(BufferError):
        append_run(sink, 1, 2, True, True, sink, 0, 2)  # type: ignore[misc]
    with pytest.raises(TypeError):
        append_run(b"not a bytearray", 1, 2, True, True, b"12345", 0, 5)  # type: ignore[misc]
    assert sink == b"kept"


@st.composite
def _frames_to_head(draw: st.DrawFn) -> tuple[bytes, int, int, bool, bytes, int, int]:
    """A sink's earlier bytes and a read: whole frames of random sizes (at least their head:
    12 bytes a request, 8 a response, size prefix included) between random bytes before and after."""
    request = draw(st.booleans())
    captured = 12 if request else 8
    frames = []
    for body in draw(st.lists(st.binary(min_size=captured - 4, max_size=300), max_size=12)):
        frames.append(struct.pack(">i", len(body)) + body)
    before_data = draw(st.binary(max_size=20))
    after_data = draw(st.binary(max_size=20))
    data = before_data + b"".join(frames) + after_data
    start, end = len(before_data), len(data) - len(after_data)
    conn = draw(st.integers(0, (1 << 32) - 1))
    ts_ns = draw(st.integers(-(1 << 63), (1 << 63) - 1))
    return draw(st.binary(max_size=40)), conn, ts_ns, request, data, start, end


@settings(max_examples=400)
@given(_frames_to_head())
def test_c_packs_a_reads_heads_as_python_does(run: tuple[bytes, int, int, bool, bytes, int, int]) -> None:
    """`append_heads` appends what `python_append_heads` does: one HEADS run of each frame's head,
    which is also what `append_run` packs for the heads joined (the writer's input either way)."""
    before, conn, ts_ns, request, data, start, end = run
    python, native, joined = bytearray(before), bytearray(before), bytearray(before)
    header_runs.python_append_heads(python, conn, ts_ns, request, data, start, end)
    append_heads(native, conn, ts_ns, request, data, start, end)
    assert native == python
    captured = 12 if request else 8
    heads, at = [], start
    while at < end:
        heads.append(data[at : at + captured])
        at += 4 + struct.unpack_from(">i", data, at)[0]
    header_runs.python_append_run(
        joined, conn, ts_ns, request, False, b"".join(heads), 0, len(b"".join(heads))
    )
    assert native == joined


def test_c_refuses_heads_of_what_is_not_whole_frames() -> None:
    """A frame cut short by the range, a size below the head, a range outside the data, a sink
    that is not a bytearray: an error from both twins, and the sink as it was."""
    request = struct.pack(">ihhi", 8, 0, 7, 1)  # a 12-byte request: its head is all of it
    sink = bytearray(b"kept")
    for data, start, end, request_side in (
        (request, 0, 11, True),  # cut short
        (struct.pack(">i", 3) + b"abc", 0, 7, True),  # shorter than a request's head
        (struct.pack(">i", -1) + b"abcd", 0, 8, False),  # a negative size
        (request, 0, 13, True),  # past the data
    ):
        for twin in (append_heads, header_runs.python_append_heads):
            with pytest.raises(ValueError):
                twin(sink, 1, 2, request_side, data, start, end)
    with pytest.raises(TypeError):
        append_heads(b"not a bytearray", 1, 2, True, request, 0, 12)  # type: ignore[arg-type]
    assert sink == b"kept"
