"""Why proxy/server.py uses asyncio Protocols: a bare byte relay written both ways, same load.

Both relays forward bytes unchanged (no Kafka parsing), so the difference is the I/O layer alone:
asyncio streams (`StreamReader.read` + `StreamWriter.write` + `drain`, one task per direction)
against Protocols (`data_received` writes straight to the other transport; pause/resume for
backpressure). Load: bench/proxy_overhead_load.c, as in bench/proxy_overhead.py.

    python bench/proxy_overhead_transports.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.proxy_overhead import SYNTHETIC, free_port, load_tool, process


async def streams_relay(listen: int, upstream: int, ready: threading.Event) -> None:
    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream)
        await asyncio.gather(pipe(client_reader, up_writer), pipe(up_reader, client_writer))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    ready.set()
    async with server:
        await server.serve_forever()


class _Side(asyncio.Protocol):
    def __init__(self) -> None:
        self.peer: _Side | None = None
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self.early.append(data)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def protocol_relay(listen: int, upstream: int, ready: threading.Event) -> None:
    loop = asyncio.get_running_loop()

    def client_side() -> _Side:
        side = _Side()

        async def connect() -> None:
            _, up = await loop.create_connection(_Side, "127.0.0.1", upstream)
            up.peer, side.peer = side, up
            assert up.transport is not None
            for data in side.early:
                up.transport.write(data)

        side.task = loop.create_task(connect())
        return side

    server = await loop.create_server(client_side, "127.0.0.1", listen)
    ready.set()
    async with server:
        await server.serve_forever()


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    tool = load_tool()
    upstream = free_port()
    table = Table(title="bare relays: asyncio streams vs Protocols (same process, same load)")
    for column in ("load", "relay", "req/s", "MB/s", "p50 ms", "p99 ms", "x streams"):
        table.add_column(column)
    with process([str(tool), "server", str(upstream)], upstream):
        for name, conns, window, size in SYNTHETIC:
            rows = {}
            for kind, relay in (("streams", streams_relay), ("protocols", protocol_relay)):
                port = free_port()
                code = (
                    "import asyncio, sys, threading; sys.path.insert(0, '.');"
                    "from bench.proxy_overhead_transports import *;"
                    f"asyncio.run({relay.__name__}({port}, {upstream}, threading.Event()))"
                )
                root = Path(__file__).resolve().parent.parent
                with process([sys.executable, "-c", code], port, cwd=root):
                    out = subprocess.run(
                        [str(tool), "client", "127.0.0.1", str(port), str(conns), str(window), str(size),
                         str(args.seconds)],
                        capture_output=True, text=True, check=True,
                    ).stdout  # fmt: skip
                rows[kind] = json.loads(out.strip().splitlines()[-1])
            for kind, data in rows.items():
                rate = data["requests"] / data["seconds"]
                base = rows["streams"]["requests"] / rows["streams"]["seconds"]
                table.add_row(
                    name if kind == "streams" else "",
                    kind,
                    f"{rate:,.0f}",
                    f"{data['bytes'] / data['seconds'] / 1e6:,.1f}",
                    f"{data['p50_us'] / 1000:.2f}",
                    f"{data['p99_us'] / 1000:.2f}",
                    f"{rate / base:.2f}",
                )
            table.add_section()
    Console(width=150).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
