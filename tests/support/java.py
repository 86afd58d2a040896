"""The harness's Java consumer through a secured proxy (shared by the TLS and SASL proxy tests)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import demo.clients
from demo.clients import ClientKind, ConsumerSpec, start_consumer


def java_client_properties(monkeypatch: pytest.MonkeyPatch, properties: Path) -> None:
    """The Java consumer started by demo.clients reads its security settings from `properties`."""
    command_for = demo.clients.command_for

    def with_properties(spec: ConsumerSpec, progress: object = None) -> list[str]:
        command = command_for(spec, progress)  # type: ignore[arg-type]
        if spec.kind is ClientKind.JAVA:
            command.insert(1, f"-Dgroup.replay.client.properties={properties}")
        return command

    monkeypatch.setattr(demo.clients, "command_for", with_properties)


def assert_java_gets_both_partitions(bootstrap: str, topic: str, client_id: str) -> None:
    """A Java consumer (client id and group named after `client_id`) is assigned both partitions
    of the 2-partition `topic`."""
    group = f"{client_id}-{os.getpid()}"
    spec = ConsumerSpec(ClientKind.JAVA, bootstrap, group, (topic,), client_id=client_id)
    with start_consumer(spec) as java:
        assigned = java.wait_assigned(timeout_ms=120_000)
        assert set(assigned.partitions) == {f"{topic}-0", f"{topic}-1"}
