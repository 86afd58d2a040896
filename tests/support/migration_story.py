"""The classic -> consumer rolling upgrade of real clients (issue 14's real end to end).

Three members of one group on a 3-partition topic, first all classic: `a` a static Java
kafka-clients 4.3.1 consumer, `b` a dynamic one, `c` a dynamic confluent-kafka (librdkafka)
consumer (demo.clients' GroupConsumer and consumer_main, range assignor), started one at a time,
each once the group has settled (a JoinGroup that arrives while the leader computes its
assignment restarts the rebalance on the broker, a race of milliseconds that replay, which gives
clients no processing time, would not reproduce). Then a rolling restart
switches them one by one to `group.protocol=consumer` (KIP-848): `a` comes back with the same
group.instance.id (a consumer-protocol member may take a classic static member's identity over,
GroupMetadataManager.getOrMaybeSubscribeStaticConsumerGroupMember), `b` and `c` leave (LeaveGroup)
and come back as new members, started as soon as the old process has closed. Each step waits
until the group has settled: every partition owned by exactly one member, every member owning
one, nothing changing for 1 s. The first consumer-protocol join converts the classic group
online (group.consumer.migration.policy, bidirectional by default in 4.x).

The consumer-protocol clients are tests/java/ConsumerProtocolMember.java (kafka-clients 4.3.1,
javac'd once per source into the harness cache) and `CONFLUENT_CONSUMER_PROTOCOL` below. Used by
tests/test_migration_capture_e2e.py (through the recording proxy, live) and by
`python -m tests.support.corpus record` (the capture in fixtures/captures/consumer-protocol/).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo.clients import (
    GROUP_CONSUMER_TRAINING,
    ClientKind,
    ConsumerSpec,
    command_for,
    compile_cached,
    java_client_command,
)
from harness.class_archive import start_jvm

JAVA_CLIENTS = "4.3.1"
PARTITIONS = 3
# The classic members' session timeout: longer than a static member's restart as a consumer-protocol
# process (a JVM start, 10 s under load), so the broker never expires it in between. An expiry
# there races the other members' heartbeats by the milliseconds a client takes to answer, which
# replay (clients answer at once) cannot reproduce.
SESSION_TIMEOUT_MS = 25_000
SETTLE_TIMEOUT_S = 120.0
QUIET_S = 1.0
JAVA_MEMBER = Path(__file__).resolve().parents[1] / "java" / "ConsumerProtocolMember.java"
# Its arguments for the run that writes its class archive (harness.class_archive.start_jvm): an
# unreachable bootstrap; it polls until start_jvm closes its stdin.
MEMBER_TRAINING = ("127.0.0.1:1", "group-replay-archive", "archive", "archive")

CONFLUENT_CONSUMER_PROTOCOL = """
import json, signal, sys, threading
from confluent_kafka import Consumer
bootstrap, group, topic, client_id = sys.argv[1:5]
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
def emit(event, parts):
    print(json.dumps({"event": event, "partitions": sorted(p.partition for p in parts)}), flush=True)
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
consumer.subscribe([topic], on_assign=lambda c, p: emit("assigned", p),
                   on_revoke=lambda c, p: emit("revoked", p), on_lost=lambda c, p: emit("revoked", p))
while not stop.is_set():
    consumer.poll(0.1)
consumer.close()
"""


@dataclass(frozen=True)
class StoryMember:
    name: str
    kind: ClientKind  # JAVA (kafka-clients JAVA_CLIENTS) or CONFLUENT
    static: bool

    def client_id(self) -> str:
        return f"{self.kind.value}-{self.name}"

    def instance_id(self, group: str) -> str | None:
        return f"{group}-{self.name}" if self.static else None


MEMBERS = (
    StoryMember("a", ClientKind.JAVA, static=True),
    StoryMember("b", ClientKind.JAVA, static=False),
    StoryMember("c", ClientKind.CONFLUENT, static=False),
)
SCENARIO_TEXT = (
    "classic -> consumer rolling upgrade: a (Java 4.3.1, static), b (Java 4.3.1, dynamic), c "
    "(confluent-kafka, dynamic) join classic; each in turn is restarted with group.protocol=consumer "
    "(a keeps its group.instance.id)"
)


class Running:
    """One consumer process of either protocol; what it owns, from its rebalance callbacks
    (assigned adds, revoked removes: right for eager and incremental callbacks alike)."""

    def __init__(self, argv: list[str], topic: str, *, stop_by_stdin: bool) -> None:
        self.topic = topic
        self.stop_by_stdin = stop_by_stdin
        self.owned: set[str] = set()
        self.changed = time.monotonic()
        self.lines: list[str] = []
        self._lock = threading.Lock()
        popen: dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
        popen["stderr"] = subprocess.STDOUT
        if "-cp" in argv:  # a JVM: it maps its class archive
            training = MEMBER_TRAINING if "ConsumerProtocolMember" in argv else GROUP_CONSUMER_TRAINING
            self.process = start_jvm(argv, train_args=training, **popen)
        else:
            self.process = subprocess.Popen(argv, **popen)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self.lines = [*self.lines[-40:], line.rstrip()]
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    event = json.loads(line)
                    names = {
                        p if isinstance(p, str) else f"{self.topic}-{p}"
                        for p in event.get("partitions") or ()
                    }
                    if event["event"] == "assigned":
                        self.owned |= names
                        self.changed = time.monotonic()
                    elif event["event"] == "revoked":
                        self.owned -= names
                        self.changed = time.monotonic()

    def view(self) -> tuple[frozenset[str], float]:
        with self._lock:
            return frozenset(self.owned), self.changed

    def describe(self) -> str:
        with self._lock:
            return f"exit {self.process.poll()}:\n  " + "\n  ".join(self.lines[-20:])

    def stop(self) -> None:
        """A clean close: the client leaves (a static classic member does not)."""
        if self.process.poll() is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                assert self.process.stdin is not None
                self.process.stdin.close()
            if not self.stop_by_stdin:
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)


def java_member_classes() -> Path:
    """ConsumerProtocolMember.class compiled against kafka-clients JAVA_CLIENTS (cached by source)."""
    return compile_cached("ConsumerProtocolMember", JAVA_MEMBER.read_text(encoding="utf-8"), JAVA_CLIENTS)


def start_member(member: StoryMember, protocol: str, bootstrap: str, group: str, topic: str) -> Running:
    """The member's process speaking `protocol` (classic or consumer)."""
    client_id, instance_id = member.client_id(), member.instance_id(group)
    if protocol == "classic":
        spec = ConsumerSpec(
            kind=member.kind,
            bootstrap=bootstrap,
            group_id=group,
            topics=(topic,),
            group_instance_id=instance_id,
            client_id=client_id,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            java_client_version=JAVA_CLIENTS,
        )
        return Running(command_for(spec), topic, stop_by_stdin=False)
    if member.kind is ClientKind.JAVA:
        member_args = [bootstrap, group, topic, client_id, *([instance_id] if instance_id else [])]
        argv = java_client_command(
            "ConsumerProtocolMember", java_member_classes(), JAVA_CLIENTS, *member_args
        )
        return Running(argv, topic, stop_by_stdin=True)
    argv = [sys.executable, "-c", CONFLUENT_CONSUMER_PROTOCOL, bootstrap, group, topic, client_id]
    return Running(argv, topic, stop_by_stdin=False)


def wait_settled(running: dict[str, Running], topic: str, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    """Until every partition is owned by exactly one member, every member owns one (a member
    whose client has not joined yet owns none) and nothing changed for QUIET_S."""
    wanted = sorted(f"{topic}-{p}" for p in range(PARTITIONS))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name, member in running.items():
            if member.process.poll() is not None:
                raise RuntimeError(f"member {name} exited early: {member.describe()}")
        views = {name: member.view() for name, member in running.items()}
        owned = sorted(tp for parts, _ in views.values() for tp in parts)
        quiet = all(time.monotonic() - changed >= QUIET_S for _, changed in views.values())
        everyone = all(parts for parts, _ in views.values())  # no more members than partitions
        if owned == wanted and everyone and quiet:
            return
        time.sleep(0.2)
    detail = "\n".join(f"  {name}: {sorted(m.view()[0])} {m.describe()}" for name, m in running.items())
    raise RuntimeError(f"the group did not settle within {timeout_s} s:\n{detail}")


@contextmanager
def _members() -> Iterator[dict[str, Running]]:
    running: dict[str, Running] = {}
    try:
        yield running
    finally:
        for member in running.values():
            member.stop()


def run_migration_story(bootstrap: str, group: str, topic: str) -> list[str]:
    """The story (module doc) against `bootstrap`; returns what happened, step by step."""
    java_member_classes()  # compiled before any member starts, so no step waits for javac
    steps: list[str] = []
    with _members() as running:
        for member in MEMBERS:  # one at a time: no JoinGroup races a rebalance in progress
            running[member.name] = start_member(member, "classic", bootstrap, group, topic)
            wait_settled(running, topic)
        steps.append("classic group settled: " + ", ".join(m.name for m in MEMBERS))
        for member in MEMBERS:
            running.pop(member.name).stop()
            running[member.name] = start_member(member, "consumer", bootstrap, group, topic)
            wait_settled(running, topic)
            steps.append(f"{member.name} restarted with group.protocol=consumer; settled")
    return steps


def event_story(events: Iterable[Any]) -> dict[str, list[tuple[object, ...]]]:
    """What a run says happened to each member, in order, without what is volatile (member ids,
    and when a classic answer arrived); and the generations (epochs) the group went through.
    What depends on the order the observer sees concurrent classic JoinGroups in is left out:
    which member a classic rebalance is attributed to, and the generation a failed request is
    counted in (the recorded run sees requests in the order they were sent, a replay in the
    order they were answered)."""
    story: dict[str, list[tuple[object, ...]]] = {"(group)": []}
    for e in events:
        if e.event == "rebalance_started":
            story["(group)"].append((e.generation_id, e.protocol, e.group_type))
            continue
        generation = None if e.event == "request_failed" else e.generation_id
        story.setdefault(e.member_key, []).append(
            (e.event, generation, e.member_epoch, e.assignment, e.error_code, e.protocol, e.group_type)
        )
    return story


__all__ = [
    "MEMBERS",
    "PARTITIONS",
    "SCENARIO_TEXT",
    "StoryMember",
    "event_story",
    "run_migration_story",
    "start_member",
    "wait_settled",
]
