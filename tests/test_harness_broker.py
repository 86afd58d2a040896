"""The harness's real brokers: start, answer, choose a coordinator, serve a group, stop clean."""

from __future__ import annotations

import json
import os
import time

import pytest

from harness import paths
from harness.broker import (
    BrokerSpec,
    BrokerState,
    cluster_id,
    find_running,
    pid_alive,
    plan_broker,
    start_broker,
    state_path,
    write_state,
)
from harness.lines import KAFKA_4X, KAFKA_39, Coordinators, Mode, line_for, parse_version
from harness.maven import missing_tools, pom_text
from harness.probe import api_versions, split_bootstrap

JOIN_GROUP = 11


# --- pure parts -------------------------------------------------------------------------------


def test_line_table_knows_the_coordinator_choices() -> None:
    assert line_for("3.9.2").coordinators is Coordinators.BOTH_DEFAULT_CLASSIC
    assert line_for("4.0.1").coordinators is Coordinators.BOTH_DEFAULT_NEW
    assert line_for(KAFKA_4X).coordinators is Coordinators.NEW_ONLY
    assert line_for("2.8.2").mode is Mode.ZOOKEEPER
    assert line_for("3.9.2").coordinator_key(True) == {"group.coordinator.new.enable": "true"}
    assert line_for("3.9.2").coordinator_key(None) == {}
    assert line_for("3.9.2").effective_new_coordinator(None) is False
    assert line_for("4.3.1").effective_new_coordinator(None) is True


@pytest.mark.parametrize(
    ("kafka_version", "new_coordinator", "message"),
    [("4.3.1", False, "only the new group coordinator"), ("3.4.1", True, "only the classic")],
)
def test_impossible_coordinator_choice_is_a_clear_error(
    kafka_version: str, new_coordinator: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        line_for(kafka_version).coordinator_key(new_coordinator)


@pytest.mark.parametrize("bad", ["3.9", "latest", "3.9.x", ""])
def test_bad_version_strings_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="must look like"):
        parse_version(bad)


def test_unknown_line_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"no Kafka line 1\.0 .*3\.9"):
        line_for("1.0.0")


def test_pom_templates_fill_in_the_version() -> None:
    text = pom_text(line_for("3.9.2").pom_template, "3.9.2")
    assert "<artifactId>kafka_2.13</artifactId>" in text and "<version>3.9.2</version>" in text
    assert "slf4j-reload4j" in text and "@" not in text
    assert "log4j-slf4j-impl" in pom_text(line_for("4.3.1").pom_template, "4.3.1")


def test_cache_root_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "c"))
    assert paths.kafka_dir("3.9.2") == tmp_path / "c" / "kafka" / "3.9.2"
    monkeypatch.delenv(paths.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert paths.cache_root() == tmp_path / "x" / "group-replay"


def test_state_files_round_trip_and_dead_pids_are_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path))
    alive = BrokerState("3.9.2", os.getpid(), "127.0.0.1:1", 1, 2, str(tmp_path / "d"), "l", False, 0)
    write_state(alive)
    assert BrokerState.from_json(state_path("3.9.2").read_text()) == alive
    assert find_running() == [alive]
    dead_pid = 2**22 + 12345  # above pid_max's default range: never a live process
    assert not pid_alive(dead_pid)
    write_state(BrokerState("4.3.1", dead_pid, "127.0.0.1:3", 3, 4, "d", "l", True, 0))
    assert find_running() == [alive]
    assert find_running("4.3.1") == []
    state_path("3.9.2").write_text("{not json")
    assert find_running() == []


# --- real brokers -----------------------------------------------------------------------------

needs_java = pytest.mark.skipif(missing_tools() is not None, reason=f"no broker: {missing_tools()}")


# The same checks run against the process provider (3.9.x, 4.x) and the container provider.
PROVIDERS = [
    "kafka_39",
    "kafka_4x",
    pytest.param("kafka_container", marks=[pytest.mark.container, pytest.mark.timeout(600)]),
]


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fixture_name", PROVIDERS)
def test_broker_answers_api_versions_with_join_group_v9(
    fixture_name: str, request: pytest.FixtureRequest
) -> None:
    broker = request.getfixturevalue(fixture_name)
    host, port = split_bootstrap(broker.bootstrap)
    ranges = api_versions(host, port)
    assert ranges[JOIN_GROUP].max_version == 9
    assert host == "127.0.0.1"
    assert (
        broker.kafka_version
        == {"kafka_39": KAFKA_39, "kafka_4x": KAFKA_4X, "kafka_container": KAFKA_39}[fixture_name]
    )


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fixture_name", PROVIDERS)
def test_static_member_joins_a_group(fixture_name: str, request: pytest.FixtureRequest, make_topic) -> None:
    """A confluent-kafka consumer with group.instance.id is assigned every partition of a topic."""
    from confluent_kafka import Consumer

    broker = request.getfixturevalue(fixture_name)
    topic = make_topic(broker.bootstrap, partitions=3)
    assigned: list[list[int]] = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{topic}",
            "group.instance.id": "static-1",
            "session.timeout.ms": 6000,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe(
            [topic], on_assign=lambda _c, parts: assigned.append(sorted(p.partition for p in parts))
        )
        deadline = time.monotonic() + 60
        while not assigned and time.monotonic() < deadline:
            consumer.poll(0.2)
    finally:
        consumer.close()
    assert assigned and assigned[0] == [0, 1, 2]


def _coordinator_lines(log_text: str) -> tuple[bool, bool]:
    new = "GroupCoordinatorService" in log_text and "Startup complete" in log_text
    old = "(kafka.coordinator.group.GroupCoordinator)" in log_text
    return new, old


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("new_coordinator", [False, True])
@pytest.mark.parametrize("kafka_version", [KAFKA_39, "4.0.1"])
def test_runs_the_chosen_group_coordinator(broker_factory, kafka_version: str, new_coordinator: bool) -> None:
    """3.6-4.0 ship both coordinators; `group.coordinator.new.enable` picks one (4.0 defaults to new)."""
    broker = broker_factory(kafka_version, new_coordinator=new_coordinator)
    new_seen, old_seen = _coordinator_lines(broker.log_path.read_text())
    assert (new_seen, old_seen) == (new_coordinator, not new_coordinator)
    assert broker.new_coordinator is new_coordinator


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_4x_runs_the_new_coordinator(kafka_4x) -> None:
    new_seen, old_seen = _coordinator_lines(kafka_4x.log_path.read_text())
    assert (new_seen, old_seen) == (True, False)


@needs_java
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_stop_leaves_no_process_and_no_data(tmp_path) -> None:
    """Own broker (not the session one): SIGTERM ends it and the temp dir is removed."""
    broker = start_broker(BrokerSpec(KAFKA_39, extra_config={"broker.rack": "r1"}))
    pid, work_dir = broker.pid, broker.plan.work_dir
    assert pid_alive(pid) and (work_dir / "server.properties").read_text().count("broker.rack=r1") == 1
    code = broker.stop()
    assert code is not None
    assert not pid_alive(pid)
    assert not work_dir.exists()
    with pytest.raises(OSError):
        api_versions("127.0.0.1", broker.plan.port, timeout_ms=500)


@needs_java
def test_plan_writes_test_settings(tmp_path) -> None:
    plan = plan_broker(BrokerSpec(KAFKA_39, new_coordinator=True), work_dir=tmp_path / "w")
    plan.write_files()
    props = dict(
        line.split("=", 1) for line in plan.config_path.read_text().splitlines() if line and "=" in line
    )
    assert props["group.coordinator.new.enable"] == "true"
    assert props["group.min.session.timeout.ms"] == "1000"
    assert (
        props["listeners"]
        == f"PLAINTEXT://127.0.0.1:{plan.port},CONTROLLER://127.0.0.1:{plan.controller_port}"
    )
    assert json.dumps(plan.format_command()).count("StorageTool") == 1


def test_cluster_ids_never_look_like_options() -> None:
    """A '-' first character made StorageTool's parser read the id as a flag (a 1-in-64 flake)."""
    ids = [cluster_id() for _ in range(2000)]
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids) and len(set(ids)) == len(ids)


@needs_java
@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_format_step_dumps_its_class_archive_once_then_maps_it(tmp_path, monkeypatch) -> None:
    """The first format of a version on a JDK leaves the archive (and no dump file); later ones
    map it: with -Xshare:on a JVM that cannot map its archive exits instead of running without."""
    import shutil
    import subprocess

    from harness import class_archive as archives
    from harness.broker import run_format

    plan = plan_broker(BrokerSpec(KAFKA_39), work_dir=tmp_path / "w")  # its jars from the shared cache
    plan.write_files()
    monkeypatch.setattr(archives.paths, "cache_root", lambda: tmp_path / "cache")
    command = plan.format_command()
    first = archives.class_archive(command[0], plan.libs, "kafka.tools.StorageTool")
    assert first.dump_path is not None and first.path is not None and not first.path.exists()
    first.discard()  # run_format claims the dump itself
    run_format(plan)
    assert sorted((tmp_path / "cache" / "class-archives").iterdir()) == [first.path]
    mapped = archives.class_archive(command[0], plan.libs, "kafka.tools.StorageTool")
    assert mapped == archives.ClassArchive(first.path, None, mapped=True)
    strict = archives.with_archive([command[0], "-Xshare:on", *command[1:]], mapped)

    def format_again() -> int:
        shutil.rmtree(plan.data_dir)  # a fresh directory (the command's cluster id is another)
        return subprocess.run(strict, capture_output=True, timeout=120).returncode

    assert format_again() == 0
    first.path.chmod(0o644)
    first.path.write_bytes(b"not an archive")
    assert format_again() != 0
