"""`group-replay broker start --brokers 3 --security sasl_ssl`: a detached 3-node SASL_SSL cluster
from the command line (issue 12), reached with the client config it writes, found by `status`,
stopped by id with nothing left behind. Runs the real CLI in subprocesses, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.broker import pid_alive
from harness.lines import KAFKA_39
from harness.maven import missing_tools
from tests.support.detached import run_when_killed, stop_command

USER, PASSWORD = "carol", "carol-cluster-secret-4e1d"


def _cli(run_dir: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "group_replay", "broker", *args, "--state-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_cluster_options_refused_without_starting_anything(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for args, message in (
        (("--brokers", "0"), "at least 1"),
        (("--brokers", "3", "--port", "19999"), "--port is for a single"),
        (("--security", "sasl_ssl"), "needs at least one --user"),
        (("--security", "sasl_ssl", "--user", "nopassword"), "NAME:PASSWORD"),
        (("--security", "sasl_ssl", "--user", 'a:b"c'), "may not contain"),
        (("--security", "ssl", "--user", "a:b"), "--user is for SASL"),
        (("--brokers", "3", "--version", "3.2.3"), "KRaft"),
    ):
        result = _cli(run_dir, "start", "--progress", "off", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)
    assert not list(run_dir.glob("cluster-*")) if run_dir.exists() else True


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(missing_tools() is not None, reason=f"no broker: {missing_tools()}")
def test_start_a_sasl_ssl_cluster_reach_it_and_stop_it(tmp_path: Path) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    run_dir = tmp_path / "run"
    with run_when_killed(stop_command(run_dir)):  # a killed test run stops the cluster too
        started = _cli(
            run_dir, "start", "--version", KAFKA_39, "--brokers", "3", "--security", "sasl_ssl",
            "--sasl-mechanism", "SCRAM-SHA-512", "--user", f"{USER}:{PASSWORD}", "--progress", "off",
        )  # fmt: skip
        try:
            assert started.returncode == 0, started.stderr
            bootstrap = started.stdout.strip().splitlines()[-1]
            assert len(bootstrap.split(",")) == 3
            status = _cli(run_dir, "status", "--format", "json")
            [cluster] = json.loads(status.stdout)
            assert cluster["kind"] == "cluster" and cluster["bootstrap"] == bootstrap
            assert str(cluster["id"]) in started.stderr and cluster["security"] == "sasl_ssl"
            assert all(pid_alive(node["pid"]) for node in cluster["nodes"])
            # A second start finds the running cluster.
            again = _cli(run_dir, "start", "--version", KAFKA_39, "--brokers", "3", "--security", "sasl_ssl",
                         "--user", f"{USER}:{PASSWORD}", "--progress", "off")  # fmt: skip
            assert again.returncode == 0 and "already running" in again.stdout

            # The librdkafka config it wrote logs in over TLS with SCRAM and sees all three brokers.
            config_path = Path(cluster["librdkafka_config"])
            settings = dict(line.split("=", 1) for line in config_path.read_text().splitlines())
            assert settings["security.protocol"] == "sasl_ssl" and settings["sasl.username"] == USER
            metadata = AdminClient({**settings, "bootstrap.servers": bootstrap}).list_topics(timeout=60)
            assert sorted(metadata.brokers) == [1, 2, 3]
            assert {f"{b.host}:{b.port}" for b in metadata.brokers.values()} == set(bootstrap.split(","))
            # A wrong password is refused by the broker (the listener really authenticates; librdkafka
            # reports the failed login as a transport failure of the metadata request).
            wrong = AdminClient({**settings, "sasl.password": "wrong", "bootstrap.servers": bootstrap})
            with pytest.raises(KafkaException):
                wrong.list_topics(timeout=15)
            java = Path(cluster["client_config"]).read_text()
            assert "security.protocol=SASL_SSL" in java and "ScramLoginModule" in java
            assert (Path(cluster["directory"]) / "certs" / "proxy.pem").exists()
            # `stop ID --node 3` crashes one node only (SIGKILL); the others keep serving.
            killed = _cli(run_dir, "stop", str(cluster["id"]), "--node", "3")
            assert killed.returncode == 0 and "killed node 3" in killed.stdout, killed.stderr
            assert not pid_alive(cluster["nodes"][2]["pid"])
            assert all(pid_alive(node["pid"]) for node in cluster["nodes"][:2])
            assert _cli(run_dir, "stop", "--node", "4").returncode == 2
        finally:
            stopped = _cli(run_dir, "stop")
    assert stopped.returncode == 0 and "cluster of 3 nodes" in stopped.stdout, stopped.stderr
    assert not any(pid_alive(node["pid"]) for node in cluster["nodes"])
    assert not list(run_dir.glob("cluster-*"))
    assert json.loads(_cli(run_dir, "status", "--format", "json").stdout) == []
