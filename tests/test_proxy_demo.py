"""`group-replay demo` records the harness's demo group through the proxy and shows the capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.lines import KAFKA_39
from proxy.capture.reader import read_capture
from proxy.demo import main
from proxy.wire import ApiKey


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_demo_records_every_member(
    broker_factory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = broker_factory(KAFKA_39, new_coordinator=False)
    path = tmp_path / "demo.pcapng"
    assert main(["--bootstrap", broker.bootstrap, "--record", str(path), "--progress", "off"]) == 0
    out = capsys.readouterr().out
    assert "after bounce" in out and "JoinGroup" in out
    capture = read_capture(path)
    assert capture.damage is None
    joins = [f for f in capture.frames if f.leg == "client" and f.api_key == ApiKey.JOIN_GROUP]
    clients = {f.client_id for f in joins}
    assert {"static-confluent", "static-java-3.9", "static-kafka-python", "dynamic-aiokafka"} <= clients
    # The bounced static member joined from two different connections.
    assert len({f.conn for f in joins if f.client_id == "static-confluent"}) >= 2
