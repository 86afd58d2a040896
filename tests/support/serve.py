"""Talking to `coordinator serve` in tests and benches: a wire client, and the served subprocess.

One copy of each, shared by tests/test_server.py, the serve robustness and fuzz tests and
bench/soak_serve.py (they had their own).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from proxy.wire import ErrorCode, FrameDecoder, decode_response, encode_request

ROOT = Path(__file__).resolve().parents[2]

# The session broker fixture's group settings (harness.broker's test settings).
TEST_GROUP_SETTINGS = ("--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0")


class WireClient:
    """One TCP connection speaking Kafka's framing; `call` sends a kio request and decodes its answer."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str = "wire-test"
    ) -> None:
        self.reader, self.writer = reader, writer
        self.client_id = client_id
        self.decoder = FrameDecoder()
        self.correlation = 0
        self.frames: list[bytes] = []

    @classmethod
    async def connect(cls, port: int, client_id: str = "wire-test") -> WireClient:
        return cls(*await asyncio.open_connection("127.0.0.1", port), client_id)

    async def send(self, request: Any) -> int:
        self.correlation += 1
        self.writer.write(encode_request(request, self.correlation, self.client_id))
        await self.writer.drain()
        return self.correlation

    async def receive(self, request: Any, timeout_s: float = 10) -> Any:
        while not self.frames:
            data = await asyncio.wait_for(self.reader.read(65536), timeout_s)
            assert data, "the server closed the connection"
            self.frames += self.decoder.feed(data)
        api_key, api_version = int(type(request).__api_key__), int(type(request).__version__)
        return decode_response(self.frames.pop(0), api_key, api_version)[1]

    async def call(self, request: Any, timeout_s: float = 10) -> Any:
        await self.send(request)
        return await self.receive(request, timeout_s)

    async def alive(self) -> bool:
        """Answers an ApiVersions request (the connection is open and not muted)."""
        from kio.schema.api_versions.v3.request import ApiVersionsRequest

        versions = await self.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        return bool(versions.error_code == ErrorCode.none)

    def close(self) -> None:
        self.writer.close()


def start_serve(
    topics: str, *extra: str, group_settings: tuple[str, ...] = TEST_GROUP_SETTINGS
) -> tuple[subprocess.Popen[str], int]:
    """`group-replay coordinator serve --port 0 --topics TOPICS` with `group_settings` and `extra`
    arguments; returns the process and the port it printed."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "group_replay",
            "coordinator",
            "serve",
            "--port",
            "0",
            "--topics",
            topics,
            *group_settings,
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"coordinator did not start: {process.stderr.read() if process.stderr else ''}")
    return process, int(json.loads(line)["port"])


@contextmanager
def served(topics: str, *extra: str, group_settings: tuple[str, ...] = TEST_GROUP_SETTINGS) -> Iterator[str]:
    """`start_serve` as a context: yields the bootstrap address, stops serve at the end and fails
    if it printed a traceback."""
    process, port = start_serve(topics, *extra, group_settings=group_settings)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
        assert process.stderr is not None
        stderr = process.stderr.read()
        assert "Traceback" not in stderr, stderr[-3000:]
