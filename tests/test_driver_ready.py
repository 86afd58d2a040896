"""replay.driver waits until the group's coordinator serves the group before a scenario starts
(issue 15, suite robustness): FindCoordinator names the leader of the group's __consumer_offsets
partition before that partition is loaded, and the first JoinGroup of a differential scenario
then met COORDINATOR_LOAD_IN_PROGRESS on a loaded machine.

A broker is in that state only for a moment after it starts, so the coordinator here is a small
TCP server speaking the real wire format (proxy.wire, kio): it answers DescribeGroups with the
states a loading or moving coordinator answers, then as a ready one does."""

from __future__ import annotations

import asyncio
import struct

from proxy.wire import decode_request, encode_response
from proxy.wire.apis import ApiKey
from proxy.wire.entities import build, build_response, response_class
from proxy.wire.errors import ErrorCode
from replay.driver import DriverError, coordinator_ready

FIND = int(ApiKey.FIND_COORDINATOR)
DESCRIBE = int(ApiKey.DESCRIBE_GROUPS)


async def _serve(answers: list[int], seen: list[tuple[int, str]]) -> tuple[asyncio.Server, int]:
    """FindCoordinator names this server; DescribeGroups answers the next code of `answers`
    (the last one repeats)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                header, request = decode_request(await reader.readexactly(size))
                api_key, api_version = int(header.api_key), int(header.api_version)
                if api_key == FIND:
                    seen.append((FIND, str(request.key)))
                    port = writer.get_extra_info("sockname")[1]
                    values = {"error_code": ErrorCode.none, "node_id": 1, "host": "127.0.0.1", "port": port}
                else:
                    code = answers.pop(0) if len(answers) > 1 else answers[0]
                    seen.append((DESCRIBE, ErrorCode(code).name))
                    group = build(
                        response_class(api_key, api_version, "DescribedGroup"),
                        {"error_code": ErrorCode(code), "group_id": request.groups[0], "group_state": "Dead"},
                    )
                    values = {"groups": (group,)}
                response = build_response(api_key, api_version, **values)
                writer.write(encode_response(response, int(header.correlation_id)))
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.CancelledError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _ready(answers: list[int], timeout_s: float) -> tuple[tuple[str, int] | BaseException, list, int]:
    seen: list[tuple[int, str]] = []

    async def main() -> tuple[tuple[str, int] | BaseException, int]:
        server, port = await _serve(list(answers), seen)
        try:
            found = await coordinator_ready("127.0.0.1", port, "g", {FIND: (0, 3)}, timeout_s=timeout_s)
        except DriverError as exc:
            found = exc
        server.close()
        return found, port

    found, port = asyncio.run(main())
    return found, seen, port


def test_a_loading_or_moved_coordinator_is_asked_again_until_it_serves_the_group() -> None:
    load, moved = int(ErrorCode.coordinator_load_in_progress), int(ErrorCode.not_coordinator)
    found, seen, port = _ready([load, load, moved, 0], timeout_s=60)
    assert found == ("127.0.0.1", port)
    describes = [what for api, what in seen if api == DESCRIBE]
    assert describes == ["coordinator_load_in_progress"] * 2 + ["not_coordinator", "none"]
    assert sum(api == FIND for api, _ in seen) == 4  # FindCoordinator again before each retry


def test_a_group_error_that_is_not_about_readiness_means_ready() -> None:
    found, seen, port = _ready([int(ErrorCode.group_authorization_failed)], timeout_s=60)
    assert found == ("127.0.0.1", port) and len(seen) == 2


def test_a_coordinator_that_never_gets_ready_is_an_error_naming_the_state() -> None:
    found, _, _ = _ready([int(ErrorCode.coordinator_load_in_progress)], timeout_s=1)
    assert isinstance(found, DriverError)
    assert "coordinator_load_in_progress" in str(found)
