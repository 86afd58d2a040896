"""The capture corpus in fixtures/captures: how it is recorded, and its manifest.

Regenerate it against real brokers (minutes; needs java, mvn, javac and the `clients` extra;
not run in CI):

    python -m tests.support.corpus record              # the whole matrix, then the manifest
    python -m tests.support.corpus record --only java-2.4.1 --broker 4.3.1
    python -m tests.support.corpus manifest            # checksums and rebalances of what is there

Each capture is a small group of real consumers of ONE client kind (demo.clients: librdkafka via
confluent-kafka, kafka-python, aiokafka, Java kafka-clients of a chosen version) joining through
`group-replay proxy --record` (the real CLI, group record scope, as a user runs it) in front of a
real broker started by the harness with Kafka's own group settings (`KAFKA_GROUP_DEFAULTS`: 3 s
initial rebalance delay), one of three stories:

- `static-bounce`: members a, b, c static (group.instance.id); b is stopped and started again
  (a static member sends no LeaveGroup, so Kafka gives it its seat back without a rebalance);
  then the group runs 60 s more, so the built-in scenarios' bounces fall inside the recording;
- `dynamic-rolling`: a, b, c dynamic; each is stopped (LeaveGroup) and started again in turn;
- `mixed`: a and b static, c dynamic; b is bounced (no rebalance), then c (two).

Beside them, in `consumer-protocol/` (the CI job's `*.pcapng` replays the classic ones), one
KIP-848 group (confluent-kafka with group.protocol=consumer against Kafka 4.3.1, member b
restarted) and one migration (tests/support/migration_story.py: Java 4.3.1 and confluent-kafka
members restarted one by one from classic to group.protocol=consumer); both replay as recorded.

The manifest (fixtures/captures/manifest.json) is derived from the files: the sha256, the
recorded rebalances (`replay.plan.recorded_events`, the `recorded` run) and what the recording
script says happened. Recording runs sequentially: one broker and one group at a time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.support.proxy import ProxyProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = REPO_ROOT / "fixtures" / "captures"
MANIFEST = "manifest.json"
BROKERS = ("3.9.2", "4.3.1")
JAVA_VERSIONS = ("2.4.1", "3.9.2", "4.3.1")
CLIENTS = ("confluent", "kafka-python", "aiokafka", *(f"java-{v}" for v in JAVA_VERSIONS))
STORIES = ("static-bounce", "dynamic-rolling", "mixed")
PARTITIONS = 3
SESSION_TIMEOUT_MS = 10_000
SETTLE_TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class Entry:
    """One manifest row."""

    file: str
    client: str
    client_version: str
    broker: str
    scenario: str
    story: str
    protocol: str  # classic (JoinGroup/SyncGroup), consumer (KIP-848 ConsumerGroupHeartbeat), mixed
    recorded_rebalances: int  # rebalance_started of the recorded run (consumer protocol: new epochs)
    members: int
    bytes: int
    sha256: str


# --- manifest -------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def recorded_rebalances(path: Path) -> tuple[str, int, int]:
    """(protocol, rebalances, members) of a capture: the `recorded` run as the replay sees it
    (`rebalance_started`; for KIP-848 members, each assignment epoch higher than any before).
    The protocol is what its members spoke: classic, consumer, or mixed (a migration)."""
    from proxy.capture.reader import read_capture
    from replay.events import EventName
    from replay.plan import build_plan, recorded_events

    plan = build_plan(read_capture(path), path.stem)
    events = recorded_events(plan)
    spoken = {p.value for script in plan.scripts for p in script.protocols}
    protocol = spoken.pop() if len(spoken) == 1 else "mixed"
    return protocol, sum(e.event == EventName.REBALANCE_STARTED for e in events), len(plan.scripts)


def capture_files(directory: Path = CORPUS_DIR) -> list[str]:
    """Every capture under `directory`, as manifest names (relative paths)."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*.pcapng"))


def load_manifest(directory: Path = CORPUS_DIR) -> list[Entry]:
    data = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    return [Entry(**row) for row in data["captures"]]


def write_manifest(directory: Path, described: dict[str, dict[str, str]]) -> list[Entry]:
    """Rows for every capture in `directory`; `described[file]` holds client, version, broker,
    scenario and story (kept from the previous manifest when a file was not re-recorded)."""
    previous: dict[str, dict[str, str]] = {}
    if (directory / MANIFEST).exists():  # rows as written, whatever columns they had
        rows_before = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))["captures"]
        previous = {row["file"]: row for row in rows_before}
    rows = []
    for name in capture_files(directory):
        path = directory / name
        about = described.get(name) or previous.get(name)
        if about is None:
            raise SystemExit(f"{name}: not recorded by this script; describe it or remove it")
        protocol, rebalances, members = recorded_rebalances(path)
        rows.append(
            Entry(
                file=name,
                client=about["client"],
                client_version=about["client_version"],
                broker=about["broker"],
                scenario=about["scenario"],
                story=about["story"],
                protocol=protocol,
                recorded_rebalances=rebalances,
                members=members,
                bytes=path.stat().st_size,
                sha256=sha256_of(path),
            )
        )
    body = {
        "about": "Real captures recorded by `python -m tests.support.corpus record` (see that module); "
        "recorded_rebalances counts rebalance_started in the capture's recorded run (consumer protocol: "
        "the assignment epochs the members were sent).",
        "captures": [asdict(r) for r in rows],
    }
    (directory / MANIFEST).write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    return rows


# --- recording ------------------------------------------------------------------------------


def client_version(client: str) -> str:
    from importlib.metadata import version

    match client:
        case "confluent":
            import confluent_kafka

            return (
                f"confluent-kafka {version('confluent-kafka')} (librdkafka {confluent_kafka.libversion()[0]})"
            )
        case "kafka-python" | "aiokafka":
            return version(client)
        case _:
            return client.removeprefix("java-")


@contextmanager
def recording_proxy(upstream: str, capture: Path) -> Iterator[str]:
    """`group-replay proxy --record` as a user runs it; yields its bootstrap, stops it with SIGINT."""
    proxy = ProxyProcess("--upstream", upstream, "--record", str(capture), "--log-level", "WARNING")
    try:
        yield proxy.bootstrap
    finally:
        out = proxy.stop(signal.SIGINT).stdout
        print(f"    {out.strip().splitlines()[-1] if out.strip() else 'proxy exited'}", flush=True)


def _spec(client: str, bootstrap: str, group: str, topic: str, name: str, static: bool) -> object:
    from demo.clients import ClientKind, ConsumerSpec

    java = client.startswith("java-")
    return ConsumerSpec(
        kind=ClientKind.JAVA if java else ClientKind(client),
        bootstrap=bootstrap,
        group_id=group,
        topics=(topic,),
        group_instance_id=f"{group}-{name}" if static else None,
        client_id=f"{client}-{name}",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        java_client_version=client.removeprefix("java-") if java else "3.9.2",
    )


STATIC = {
    "static-bounce": {"a": True, "b": True, "c": True},
    "dynamic-rolling": {"a": False, "b": False, "c": False},
    "mixed": {"a": True, "b": True, "c": False},
}
BOUNCES = {"static-bounce": ("b",), "dynamic-rolling": ("a", "b", "c"), "mixed": ("b", "c")}
# Seconds the settled group runs on before every member stops: the static bounces are also the
# corpus' input for the built-in scenarios, which bounce members from 10 s after the group settles.
HOLD_S = {"static-bounce": 60, "dynamic-rolling": 0, "mixed": 0}
SCENARIO_TEXT = {
    "static-bounce": "3 static members a, b, c; static bounce of member b (stopped without LeaveGroup, "
    "restarted within the session timeout); then 60 s steady",
    "dynamic-rolling": "3 dynamic members a, b, c; rolling restart a, b, c (each leaves with LeaveGroup "
    "and joins again)",
    "mixed": "mixed group: a, b static, c dynamic; static bounce of b, then restart of dynamic c",
}


def run_story(client: str, story: str, bootstrap: str, topic: str, group: str) -> None:
    from demo.clients import start_consumer
    from demo.group import wait_settled

    wanted = {f"{topic}-{p}" for p in range(PARTITIONS)}
    running = {}
    try:
        for name, static in STATIC[story].items():
            running[name] = start_consumer(_spec(client, bootstrap, group, topic, name, static))  # type: ignore[arg-type]
        wait_settled(running, wanted, SETTLE_TIMEOUT_MS)
        for name in BOUNCES[story]:
            running[name].stop()
            if not STATIC[story][name]:  # the others rebalance without it before it comes back
                wait_settled({k: v for k, v in running.items() if k != name}, wanted, SETTLE_TIMEOUT_MS)
            running[name] = start_consumer(
                _spec(client, bootstrap, group, topic, name, STATIC[story][name])  # type: ignore[arg-type]
            )
            running[name].wait_for(lambda e: e.event == "assigned" and bool(e.partitions), SETTLE_TIMEOUT_MS)
            wait_settled(running, wanted, SETTLE_TIMEOUT_MS)
        time.sleep(HOLD_S[story])
    finally:
        for process in running.values():
            process.stop()


CONSUMER_PROTOCOL_FILE = "kafka-4.3.1--confluent--consumer-protocol-restart.pcapng"
CONSUMER_PROTOCOL_SCENARIO = (
    "KIP-848 consumer protocol (group.protocol=consumer): 3 members a, b, c; b is stopped "
    "(leaves with epoch -1) and started again"
)
_CONSUMER_PROTOCOL_MEMBER = """
import signal, sys, time
from confluent_kafka import Consumer
bootstrap, group, topic, client_id = sys.argv[1:5]
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
consumer.subscribe([topic])
while not stop:
    consumer.poll(0.1)
consumer.close()
"""


def record_consumer_protocol(out: Path) -> dict[str, dict[str, str]]:
    """One KIP-848 group (confluent-kafka, group.protocol=consumer) against Kafka 4.3.1, kept in
    `consumer-protocol/` beside the classic captures: the CI job's `*.pcapng` replays the classic
    ones under built-in scenarios written for them. Timed phases (librdkafka reports KIP-848 assignments
    incrementally, so there is no whole assignment to wait for)."""
    from harness.admin import create_topic
    from harness.broker import BrokerSpec, start_broker
    from harness.cli import KAFKA_GROUP_DEFAULTS

    directory = out / "consumer-protocol"
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / CONSUMER_PROTOCOL_FILE
    partial = target.with_name(target.name + ".partial")
    topic, group = "corpus-consumer-protocol", "confluent-consumer-protocol"

    def member(bootstrap: str, name: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-c", _CONSUMER_PROTOCOL_MEMBER, bootstrap, group, topic, f"confluent-{name}"]
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL)

    def stop(process: subprocess.Popen[bytes]) -> None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()

    print(f"Kafka 4.3.1: starting\n  consumer-protocol/{target.name}", flush=True)
    broker = start_broker(BrokerSpec("4.3.1", extra_config=KAFKA_GROUP_DEFAULTS))
    try:
        create_topic(broker.bootstrap, topic, PARTITIONS)
        with recording_proxy(broker.bootstrap, partial) as bootstrap:
            members = {name: member(bootstrap, name) for name in ("a", "b", "c")}
            try:
                time.sleep(15)
                stop(members["b"])
                time.sleep(4)
                members["b"] = member(bootstrap, "b")
                time.sleep(15)
            finally:
                for process in members.values():
                    stop(process)
    finally:
        broker.stop()
    partial.replace(target)
    return {
        f"consumer-protocol/{target.name}": {
            "client": "confluent",
            "client_version": client_version("confluent"),
            "broker": "4.3.1",
            "scenario": CONSUMER_PROTOCOL_SCENARIO,
            "story": "consumer-protocol-restart",
        }
    }


MIGRATION_FILE = "kafka-4.3.1--java-4.3.1+confluent--classic-to-consumer-rolling-upgrade.pcapng"


def record_migration(out: Path) -> dict[str, dict[str, str]]:
    """The classic -> consumer rolling upgrade of tests/support/migration_story.py (Java 4.3.1
    and confluent-kafka members, restarted one by one with group.protocol=consumer) through the
    recording proxy in front of Kafka 4.3.1; kept in `consumer-protocol/` (its protocol: mixed)."""
    from harness.admin import create_topic
    from harness.broker import BrokerSpec, start_broker
    from harness.cli import KAFKA_GROUP_DEFAULTS
    from tests.support.migration_story import PARTITIONS as STORY_PARTITIONS
    from tests.support.migration_story import SCENARIO_TEXT as STORY_TEXT
    from tests.support.migration_story import run_migration_story

    directory = out / "consumer-protocol"
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / MIGRATION_FILE
    partial = target.with_name(target.name + ".partial")
    topic, group = "corpus-migration", "migration-rolling-upgrade"
    print(f"Kafka 4.3.1: starting\n  consumer-protocol/{target.name}", flush=True)
    broker = start_broker(BrokerSpec("4.3.1", extra_config=KAFKA_GROUP_DEFAULTS))
    try:
        create_topic(broker.bootstrap, topic, STORY_PARTITIONS)
        with recording_proxy(broker.bootstrap, partial) as bootstrap:
            for step in run_migration_story(bootstrap, group, topic):
                print(f"    {step}", flush=True)
    finally:
        broker.stop()
    partial.replace(target)
    return {
        f"consumer-protocol/{target.name}": {
            "client": "java-4.3.1+confluent",
            "client_version": f"4.3.1; {client_version('confluent')}",
            "broker": "4.3.1",
            "scenario": STORY_TEXT,
            "story": "classic-to-consumer-rolling-upgrade",
        }
    }


def record(
    out: Path, brokers: Sequence[str], clients: Sequence[str], stories: Sequence[str]
) -> dict[str, dict[str, str]]:
    from harness.admin import create_topic
    from harness.broker import BrokerSpec, start_broker
    from harness.cli import KAFKA_GROUP_DEFAULTS

    out.mkdir(parents=True, exist_ok=True)
    described: dict[str, dict[str, str]] = {}
    failures = []
    for kafka_version in brokers:
        print(f"Kafka {kafka_version}: starting", flush=True)
        broker = start_broker(BrokerSpec(kafka_version, extra_config=KAFKA_GROUP_DEFAULTS))
        try:
            for client in clients:
                for story in stories:
                    name = f"kafka-{kafka_version}--{client}--{story}.pcapng"
                    group = f"{client}-{story}".replace(".", "")
                    topic = f"corpus-{client}-{story}".replace(".", "")
                    print(f"  {name}", flush=True)
                    create_topic(broker.bootstrap, topic, PARTITIONS)
                    target = out / name
                    partial = out / (name + ".partial")
                    began = time.monotonic()
                    try:
                        with recording_proxy(broker.bootstrap, partial) as bootstrap:
                            run_story(client, story, bootstrap, topic, group)
                    except Exception as exc:  # one failed story does not lose the others
                        failures.append(f"{name}: {exc}")
                        print(f"    FAILED: {str(exc)[:2000]}", flush=True)
                        partial.unlink(missing_ok=True)
                        continue
                    partial.replace(target)
                    described[name] = {
                        "client": client,
                        "client_version": client_version(client),
                        "broker": kafka_version,
                        "scenario": SCENARIO_TEXT[story],
                        "story": story,
                    }
                    print(
                        f"    {target.stat().st_size} bytes in {time.monotonic() - began:.0f} s", flush=True
                    )
        finally:
            broker.stop()
    if failures:
        print("failed:\n  " + "\n  ".join(failures), flush=True)
    return described


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.corpus", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record captures against real brokers, then write the manifest")
    rec.add_argument("--out", type=Path, default=CORPUS_DIR)
    rec.add_argument("--broker", action="append", choices=BROKERS, help="Kafka version (repeatable)")
    rec.add_argument("--only", action="append", choices=CLIENTS, help="client (repeatable)")
    rec.add_argument("--story", action="append", choices=STORIES, help="story (repeatable)")
    rec.add_argument(
        "--consumer-protocol",
        choices=("with", "only", "without"),
        default="with",
        help="the KIP-848 captures (confluent-kafka with group.protocol=consumer, and the classic -> "
        "consumer rolling upgrade of Java 4.3.1 and confluent-kafka members, Kafka 4.3.1): with the "
        "classic matrix (default), only them, or without them",
    )
    man = sub.add_parser("manifest", help="rewrite the manifest from the captures present")
    man.add_argument("--out", type=Path, default=CORPUS_DIR)
    args = parser.parse_args(argv)
    if args.command == "record":
        if shutil.which("javac") is None:
            print("javac not found: the Java clients need a JDK", file=sys.stderr)
            return 2
        described = {}
        if args.consumer_protocol != "only":
            described |= record(args.out, args.broker or BROKERS, args.only or CLIENTS, args.story or STORIES)
        if args.consumer_protocol != "without":
            described |= record_consumer_protocol(args.out)
            described |= record_migration(args.out)
        rows = write_manifest(args.out, described)
        print(f"manifest: {len(rows)} captures, {sum(r.bytes for r in rows)} bytes", flush=True)
    else:
        write_manifest(args.out, {})
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
