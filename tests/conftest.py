"""Shared fixtures: real Kafka brokers from Maven jars, started once per session and reused.

Names are a contract other parts' tests use: `broker_factory`, `kafka_39`, `kafka_4x`,
`make_topic`, `kafka_container`. Integration tests start what they need through these; nothing is
assumed to be running. Without java or mvn, broker fixtures skip with that reason.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from harness.broker import Broker, BrokerError, BrokerSpec, SecureListener, start_broker
from harness.certs import CertAuthority, Leaf
from harness.cluster import Cluster, start_cluster
from harness.lines import KAFKA_4X, KAFKA_39
from harness.maven import MavenError, missing_tools
from tests.support.suite_split import SuiteSplit, WorkerBusy, groups_on_several_workers, module_groups

BrokerFactory = Callable[..., Broker]
_topic_counter = itertools.count(1)

# Hypothesis's per-example deadline (200 ms by default) is a timing assertion: on two loaded cores
# shared by two xdist workers an example of a property test ran past it once (a Metadata rewrite
# property, not slow code). Tests never assert timings (CONTRIBUTING.md), so no deadline anywhere.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


@dataclass(frozen=True)
class BrokerStart:
    """One broker the factory started: its spec and how long the start took (the suite's budget
    is mostly broker starts and broker timers; the terminal summary lists these)."""

    spec: str
    seconds: float
    replaced: str | None  # the spec stopped to make room, if any


BROKER_STARTS: list[BrokerStart] = []
# Under pytest-xdist, each worker's time in tests (the controller's view, from its reports).
WORKERS: dict[str, WorkerBusy] = {}
_SESSION_START = [time.time()]
_SPLIT: list[SuiteSplit] = []  # the controller's, in a `--dist loadgroup` run

# How many brokers the factory keeps running at once (each JVM: -Xmx384m, about 400 MB resident,
# idle between tests). 4 keeps the 3.9 classic and 4.x brokers most tests use up while the
# per-config ones come and go; with 2 they were stopped and started again and again (docs/ci.md,
# "keeping its budget").
DEFAULT_MAX_BROKERS = 4


# The specs `kafka_39` and `kafka_4x` ask for, which most modules use: the factory stops them only
# when every running broker is one of them. Least-recently-used alone stopped them for a run of
# per-config brokers (test_harness_broker, test_harness_zookeeper, the migration policies) and
# started them again minutes later (an LRU replay of the suite's order: 25 starts, 22 with these
# kept, for 20 distinct specs).
_WORKHORSES = {(KAFKA_39, False, (), ()), (KAFKA_4X, None, (), ())}


def batch_brokers() -> int:
    """How many brokers of other specs a test may start and keep using at once: `max_brokers()`
    less the two workhorse specs the factory stops last (with 4: two, beside kafka_39 and
    kafka_4x; asking for more makes the factory stop one of the batch's own)."""
    return max(1, max_brokers() - len(_WORKHORSES))


def max_brokers() -> int:
    """`GROUP_REPLAY_MAX_BROKERS`, else `DEFAULT_MAX_BROKERS`: tests that start brokers in batches
    read the limit here, so they never ask the factory to stop one they still use."""
    return int(os.environ.get("GROUP_REPLAY_MAX_BROKERS", str(DEFAULT_MAX_BROKERS)))


def _spec_name(key: tuple[object, ...]) -> str:
    kafka_version, new_coordinator, config, secure = key
    parts = [str(kafka_version)]
    if new_coordinator is not None:
        parts.append("new" if new_coordinator else "classic")
    parts += [f"{k}={v}" for k, v in config]  # type: ignore[attr-defined]
    if secure:
        parts.append("secure listeners")
    return " ".join(parts)


@pytest.fixture(scope="session")
def broker_factory() -> Iterator[BrokerFactory]:
    """`broker_factory("3.9.2", new_coordinator=False, extra_config=None)` -> a running Broker.

    One broker per distinct spec for the whole session, stopped at session end. At most
    `max_brokers()` (`GROUP_REPLAY_MAX_BROKERS`, default 4) run at once: starting another stops the
    least recently used one (the `kafka_39` and `kafka_4x` specs last), so the specs in use stay up
    and memory stays bounded.
    """
    reason = missing_tools()
    if reason:
        pytest.skip(f"cannot run Kafka brokers: {reason}")
    limit = max_brokers()
    running: dict[tuple[object, ...], Broker] = {}  # least recently used first

    def factory(
        kafka_version: str = KAFKA_39,
        new_coordinator: bool | None = None,
        extra_config: dict[str, str] | None = None,
        secure_listeners: tuple[SecureListener, ...] = (),
    ) -> Broker:
        key = (kafka_version, new_coordinator, tuple(sorted((extra_config or {}).items())), secure_listeners)
        broker = running.pop(key, None)
        if broker is not None and broker.is_running():
            running[key] = broker  # now the most recently used
            return broker
        replaced = None
        while len(running) >= limit:
            oldest = next((k for k in running if k not in _WORKHORSES), next(iter(running)))
            running.pop(oldest).stop()
            replaced = _spec_name(oldest)
        started = time.monotonic()
        try:
            spec = BrokerSpec(
                kafka_version, new_coordinator, extra_config or {}, secure_listeners=secure_listeners
            )
            broker = start_broker(spec, progress=None)
        except (BrokerError, MavenError) as exc:
            pytest.fail(f"could not start Kafka {kafka_version}: {exc}", pytrace=False)
        BROKER_STARTS.append(BrokerStart(_spec_name(key), time.monotonic() - started, replaced))
        running[key] = broker
        return broker

    yield factory
    for broker in running.values():
        broker.stop()


def pytest_configure(config: pytest.Config) -> None:
    """The controller of a `--dist loadgroup` run makes the directory its workers write groups to."""
    if config.getoption("dist", "no") == "loadgroup" and not hasattr(config, "workerinput"):
        _SPLIT.append(SuiteSplit(Path(tempfile.mkdtemp(prefix="group-replay-split-"))))


def pytest_unconfigure(config: pytest.Config) -> None:
    for split in _SPLIT:
        shutil.rmtree(split.directory, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)  # xdist's hooks: the suite runs without xdist too
def pytest_configure_node(node: Any) -> None:
    if _SPLIT:
        node.workerinput["suite_split"] = str(_SPLIT[0].directory)


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # in place of xdist's loadgroup scheduler
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return _SPLIT[0].scheduler(config, log) if _SPLIT else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A worker writes every test's group (tests/support/suite_split.py: shared brokers in one
    worker, Spark in one) for the controller's scheduler."""
    directory = getattr(config, "workerinput", {}).get("suite_split")
    if directory:
        SuiteSplit(Path(directory)).write(config.workerinput["workerid"], module_groups(items))


def pytest_sessionstart(session: pytest.Session) -> None:
    _SESSION_START[0] = time.time()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # xdist sets it on the controller's copy of a worker's report
    if node is not None:
        group = _SPLIT[0].group(report.nodeid) if _SPLIT else "-"
        WORKERS.setdefault(node.gateway.id, WorkerBusy()).add(report, group)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker hands its broker starts to the controller (`pytest_testnodedown`)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["broker_starts"] = [dataclasses.astuple(s) for s in BROKER_STARTS]


@pytest.hookimpl(optionalhook=True)  # an xdist hook: the run works without xdist too
def pytest_testnodedown(node: object, error: object) -> None:
    output = getattr(node, "workeroutput", {})
    BROKER_STARTS.extend(BrokerStart(*s) for s in output.get("broker_starts", ()))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many brokers the session started, and for what: a spec started more than once was
    stopped to make room for others (see docs/ci.md, "The suite's budget"). Under pytest-xdist
    the starts are the workers' (`pytest_testnodedown` gathers them), and each worker's busy time
    follows: the split is balanced when the two end close together."""
    if BROKER_STARTS:
        total = sum(s.seconds for s in BROKER_STARTS)
        terminalreporter.section(f"broker starts: {len(BROKER_STARTS)}, {total:.0f} s")
        for s in BROKER_STARTS:
            replaced = f" (stopped {s.replaced})" if s.replaced else ""
            terminalreporter.write_line(f"{s.seconds:6.1f}s {s.spec}{replaced}")
    if WORKERS:
        terminalreporter.section(f"xdist workers: {len(WORKERS)}")
        for name, busy in sorted(WORKERS.items()):
            terminalreporter.write_line(busy.line(name, _SESSION_START[0]))
        split = groups_on_several_workers(WORKERS) if _SPLIT else []
        if split:
            broken = f"groups on several workers (the split is broken): {', '.join(split)}"
            terminalreporter.write_line(broken, red=True)


@pytest.fixture
def kafka_39(broker_factory: BrokerFactory) -> Broker:
    """Kafka 3.9.x (newest patch) with the classic (Scala) group coordinator."""
    return broker_factory(KAFKA_39, new_coordinator=False)


@pytest.fixture
def kafka_4x(broker_factory: BrokerFactory) -> Broker:
    """The newest Kafka 4.x on Maven Central (new group coordinator, the only one in 4.1+)."""
    return broker_factory(KAFKA_4X)


# Credentials of the `secure_broker` (issue 12): distinctive so a grep of captures and logs finds them.
SASL_USERS = (("alice", "alice-plain-secret-7f3a9c"), ("bob", "bob-scram-secret-91bd2e"))


@dataclass(frozen=True)
class SecureSetup:
    """The session's certificates and the secure listeners that use them: `ca` signs the broker's
    certificate and `client` (a client certificate the broker trusts)."""

    ca: CertAuthority
    client: Leaf
    directory: Path
    listeners: tuple[SecureListener, ...]


@dataclass(frozen=True)
class SecureBroker:
    """A Kafka 3.9 broker with SSL, MTLS (SSL, client certificate required), SASL_PLAINTEXT and
    SASL_SSL listeners beside PLAINTEXT (`setup`); SASL users `SASL_USERS` for PLAIN and
    SCRAM-SHA-512."""

    broker: Broker
    setup: SecureSetup

    def listener(self, name: str) -> str:
        return self.broker.listener_bootstrap(name)


@pytest.fixture(scope="session")
def _secure_setup(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    """The session's certificates (made once) and the listeners that use them."""
    from harness.certs import CertError, make_ca

    directory = tmp_path_factory.mktemp("tls")
    try:
        ca = make_ca(directory)
        server = ca.issue("broker")
        client = ca.issue("client")
    except CertError as exc:
        pytest.skip(f"cannot make test certificates: {exc}")
    tls = {"keystore_pem": str(server.bundle), "truststore_pem": str(ca.cert)}
    sasl = {"mechanisms": ("PLAIN", "SCRAM-SHA-512"), "users": SASL_USERS}
    listeners = (
        SecureListener("SSL", **tls),
        SecureListener("SSL", **tls, client_auth="required", listener_name="MTLS"),
        SecureListener("SASL_PLAINTEXT", **sasl),  # type: ignore[arg-type]
        SecureListener("SASL_SSL", **tls, **sasl),  # type: ignore[arg-type]
    )
    return SecureSetup(ca, client, directory, listeners)


@pytest.fixture
def secure_broker(broker_factory: BrokerFactory, _secure_setup: SecureSetup) -> SecureBroker:
    """The session's broker with SSL/SASL listeners (one per session: the factory keeps it, and
    starts it again if it was stopped to make room for others)."""
    setup = _secure_setup
    broker = broker_factory(KAFKA_39, new_coordinator=False, secure_listeners=setup.listeners)
    return SecureBroker(broker, setup)


@pytest.fixture(scope="session")
def kafka_cluster(_secure_setup: SecureSetup) -> Iterator[Cluster]:
    """A 3-node Kafka 3.9 KRaft cluster (issue 12), offsets topic replicated to every node, with
    the `secure_broker`'s listeners (SSL, MTLS, SASL_PLAINTEXT, SASL_SSL) on every node.
    A test that kills a node restarts it (`Cluster.restart`) before it ends."""
    reason = missing_tools()
    if reason:
        pytest.skip(f"cannot run Kafka brokers: {reason}")
    try:
        spec = BrokerSpec(KAFKA_39, new_coordinator=False, secure_listeners=_secure_setup.listeners)
        cluster = start_cluster(spec, 3, progress=None)
    except (BrokerError, MavenError) as exc:
        pytest.fail(f"could not start a Kafka cluster: {exc}", pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture
def make_topic() -> Callable[..., str]:
    """`make_topic(bootstrap, partitions=1, prefix="t")` -> a fresh topic name, created and ready."""
    from harness.admin import create_topic

    def make(bootstrap: str, partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{os.getpid()}-{next(_topic_counter)}"
        create_topic(bootstrap, name, partitions)
        return name

    return make


@pytest.fixture(scope="session")
def container_engine() -> Iterator[object]:
    """A Docker-API engine for testcontainers: `DOCKER_HOST` if it answers, else a podman service
    started here (and stopped at session end). Skips with the engine's own error if none can run."""
    from harness.container.engine import EngineUnavailable, start_engine

    try:
        engine = start_engine()
    except EngineUnavailable as exc:
        pytest.skip(f"no container engine: {exc}")
    engine.export_env()
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def kafka_container(container_engine: object) -> Iterator[object]:
    """Kafka 3.9.x (classic coordinator) in a locally built image, started by testcontainers.

    Module-scoped (not session) so it does not stay up beside the brokers the factory keeps
    running.
    Yields an `ApacheKafkaContainer` with `.bootstrap` ("127.0.0.1:<mapped port>") and
    `.kafka_version`, like a Broker. The image is built once per machine (tag = hash of inputs).
    """
    reason = missing_tools()
    if reason:
        pytest.skip(f"cannot build the Kafka image: {reason}")
    from harness.container.image import ensure_image
    from harness.container.kafka import ApacheKafkaContainer

    tag = ensure_image(KAFKA_39)
    container = ApacheKafkaContainer(tag, KAFKA_39, new_coordinator=False)
    container.start()
    yield container
    container.stop()
