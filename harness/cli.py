"""`group-replay broker start|stop|status`: a real Kafka broker for manual work and other tools.

`start` runs the broker detached (it outlives this command) and writes a state file in a state
directory (`--state-dir`, default `<cache>/run/`) with its pid, ports, bootstrap and data dir;
`status` and `stop` find it there, and so can any other process (`harness.broker.find_running`).
`start --brokers N` starts an N-node KRaft cluster the same way (`cluster-<version>.json`, its
nodes, certificates and client configs in `cluster-<version>/` of the state directory), and
`--security` gives every node a client listener with TLS and/or SASL (`harness.security`).
Clusters run as local processes, or with `--provider container` in containers (harness.container.cluster).
`stop` stops only what `start` started: the broker named by its id (the pid `start` prints), or
every broker of one state directory; never a broker some other tool or test runs. A broker
started here uses Kafka's own group settings (`KAFKA_GROUP_DEFAULTS`) unless `--set` says
otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from group_replay import add_enum_option, add_progress_option, parse_args
from harness import paths
from harness.broker import (
    SASL_MECHANISMS,
    BrokerError,
    BrokerSpec,
    BrokerState,
    SecureListener,
    find_running,
    pid_alive,
    start_broker,
    stop_detached,
    write_state,
)
from harness.certs import CertError
from harness.cluster import (
    ClusterState,
    cluster_directory,
    find_running_clusters,
    start_cluster,
    stop_detached_cluster,
    write_cluster_state,
)
from harness.lines import DEFAULT_KAFKA_VERSION, KAFKA_4X, KAFKA_39, Mode, line_for
from harness.maven import MavenError, ProgressCallback, missing_tools
from harness.progress import download_progress
from harness.security import Security, parse_user, prepare

# Kafka's own defaults for the group settings the harness's quick test settings change
# (GroupCoordinatorConfig: GROUP_INITIAL_REBALANCE_DELAY_MS_DEFAULT = 3000,
# GROUP_MIN_SESSION_TIMEOUT_MS_DEFAULT = 6000). Brokers the product starts for a user use them
# unless the user sets otherwise (`--set`); tests pin them to replay.brokers' table.
KAFKA_GROUP_DEFAULTS: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
}


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"where the state files of started brokers live (default ${paths.RUN_DIR_ENV} or "
        "<cache>/run); relative to the current directory",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="group-replay broker", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    start = sub.add_parser("start", help="start a broker in the background and print its bootstrap")
    start.add_argument(
        "--version",
        dest="kafka_version",
        default=DEFAULT_KAFKA_VERSION,
        help=f"Kafka version (e.g. {KAFKA_39}, {KAFKA_4X}); default {DEFAULT_KAFKA_VERSION}",
    )
    start.add_argument(
        "--new-coordinator",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="choose the group coordinator where the line has both (3.6-4.0)",
    )
    start.add_argument(
        "--port",
        type=int,
        default=None,
        help="the client listener's port on 127.0.0.1 (default: a free one)",
    )
    start.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting (repeatable); group settings default to Kafka's own",
    )
    start.add_argument(
        "--heap-mb", type=int, default=384, help="each broker JVM's heap in MB (default %(default)s)"
    )
    start.add_argument(
        "--brokers",
        type=int,
        default=1,
        metavar="N",
        help="start an N-node KRaft cluster (3.3+; each node broker and controller, the offsets "
        "topic replicated to 3 nodes) instead of one broker (default %(default)s)",
    )
    start.add_argument(
        "--provider",
        choices=["process", "container"],
        default="process",
        help="run the nodes as local processes, or in containers of a locally built image "
        "(testcontainers on podman; PLAINTEXT listeners only) (default %(default)s)",
    )
    add_enum_option(
        start,
        "--security",
        Security.PLAINTEXT,
        help="the client listener's security: TLS certificates (a CA, the brokers', and one for a "
        "TLS proxy) are made in the state dir; prints that listener's bootstrap and writes "
        "client.properties / librdkafka.properties for it (default %(default)s)",
    )
    start.add_argument(
        "--sasl-mechanism",
        choices=SASL_MECHANISMS,
        default="SCRAM-SHA-512",
        help="with --security sasl_*: the mechanism (default %(default)s)",
    )
    start.add_argument(
        "--user",
        dest="users",
        action="append",
        default=[],
        metavar="NAME:PASSWORD",
        help="a SASL user (repeatable; the first goes into the client configs)",
    )
    add_progress_option(start, "jar downloads")
    _add_state_dir(start)
    stop = sub.add_parser("stop", help="stop a broker started with `start` (by id, or all of a state dir)")
    stop.add_argument(
        "ids",
        nargs="*",
        metavar="ID",
        help="the id `start` printed (its pid; `status` lists them); none: every broker of the state dir",
    )
    stop.add_argument(
        "--version", dest="kafka_version", default=None, help="only brokers of this Kafka version"
    )
    stop.add_argument(
        "--node",
        type=int,
        default=None,
        metavar="N",
        help="kill only node N of the cluster (SIGKILL: a crash, no controlled shutdown; the other "
        "nodes keep running and `stop ID` later stops them)",
    )
    _add_state_dir(stop)
    status = sub.add_parser("status", help="list running brokers")
    status.add_argument(
        "--version", dest="kafka_version", default=None, help="only brokers of this Kafka version"
    )
    status.add_argument(
        "--format", choices=["table", "json"], default="table", help="output format (default table)"
    )
    _add_state_dir(status)
    return parser


@contextmanager
def _state_dir(path: Path | None) -> Iterator[None]:
    """Point the harness's state files at `path` (absolute: resolved against the caller's directory)
    for this command only."""
    if path is None:
        yield
        return
    before = os.environ.get(paths.RUN_DIR_ENV)
    os.environ[paths.RUN_DIR_ENV] = os.path.abspath(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(paths.RUN_DIR_ENV, None)
        else:
            os.environ[paths.RUN_DIR_ENV] = before


def _settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set wants KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _print_table(states: list[BrokerState], clusters: list[ClusterState]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Kafka brokers started by group-replay")
    # What a user copies from this table (id, bootstrap) is never cut short; the data
    # directory folds onto more lines when the terminal is narrow.
    bootstraps = [s.bootstrap for s in states] + [f"{c.bootstrap} ({c.security})" for c in clusters]
    for column in ("id", "version", "nodes", "bootstrap", "coordinator", "up", "data dir"):
        match column:
            case "id" | "version":
                table.add_column(column, no_wrap=True, min_width=len(column))
            case "bootstrap":
                table.add_column(column, overflow="fold", min_width=max(map(len, bootstraps), default=9))
            case "data dir":
                table.add_column(column, overflow="fold")
            case _:
                table.add_column(column)
    now_ms = int(time.time() * 1000)
    for state in states:
        table.add_row(
            str(state.pid),
            state.kafka_version,
            "1",
            state.bootstrap,
            "new" if state.new_coordinator else "classic",
            f"{(now_ms - state.started_at_ms) // 1000} s",
            state.data_dir,
        )
    for cluster in clusters:
        table.add_row(
            str(cluster.id),
            cluster.kafka_version,
            f"{sum(pid_alive(n.pid) for n in cluster.nodes)}/{len(cluster.nodes)}",
            f"{cluster.bootstrap} ({cluster.security})",
            "new" if cluster.nodes[0].new_coordinator else "classic",
            f"{(now_ms - cluster.started_at_ms) // 1000} s",
            cluster.directory,
        )
    Console().print(table)


def broker_main(argv: list[str]) -> int:
    args = parse_args(_parser(), argv)
    if isinstance(args, int):
        return args
    with _state_dir(args.state_dir):
        match args.action:
            case "start":
                return _start(args)
            case "stop":
                return _stop(args)
            case "status":
                return _status(args)
    return 2


def _stop(args: argparse.Namespace) -> int:
    states = find_running(args.kafka_version)
    clusters = find_running_clusters(args.kafka_version)
    if args.ids:
        known = {str(state.pid): state for state in states}
        known_clusters = {str(cluster.id): cluster for cluster in clusters}
        unknown = [i for i in args.ids if i not in known and i not in known_clusters]
        if unknown:
            listed = [f"{s.pid} (Kafka {s.kafka_version})" for s in states]
            listed += [f"{c.id} (Kafka {c.kafka_version}, {len(c.nodes)} nodes)" for c in clusters]
            print(
                f"group-replay broker: no broker with id {', '.join(unknown)} in {paths.run_dir()} "
                f"(running: {', '.join(listed) or 'none'})",
                file=sys.stderr,
            )
            return 2
        states = [known[i] for i in args.ids if i in known]
        clusters = [known_clusters[i] for i in args.ids if i in known_clusters]
    if args.node is not None:
        return _kill_node(clusters, args.node)
    if not states and not clusters:
        which = f"Kafka {args.kafka_version}" if args.kafka_version else "broker"
        print(f"no running {which} started from {paths.run_dir()}", file=sys.stderr)
        return 0
    for state in states:
        stop_detached(state)
        print(f"stopped Kafka {state.kafka_version} (id {state.pid}, {state.bootstrap})")
    for cluster in clusters:
        stop_detached_cluster(cluster)
        print(
            f"stopped Kafka {cluster.kafka_version} cluster of {len(cluster.nodes)} nodes "
            f"(id {cluster.id}, {cluster.bootstrap})"
        )
    return 0


def _start_container_cluster(
    args: argparse.Namespace, settings: dict[str, str], security: Security, directory: Path
) -> int:
    if security is not Security.PLAINTEXT:
        print("group-replay broker: --provider container has PLAINTEXT listeners only", file=sys.stderr)
        return 2
    from harness.container.cluster import start_detached_container_cluster

    state, code = _launched(
        args,
        lambda progress: start_detached_container_cluster(
            args.kafka_version, args.brokers, args.new_coordinator, settings, directory, progress
        ),
        on_failure=lambda: shutil.rmtree(directory, ignore_errors=True),
    )
    if state is None:
        return code
    path = write_cluster_state(state)
    print(state.bootstrap)
    print(
        f"Kafka {args.kafka_version} cluster of {args.brokers} containers, id {state.id}; state {path}; "
        f"stop it with `group-replay broker stop {state.id}`",
        file=sys.stderr,
    )
    return 0


def _kill_node(clusters: list[ClusterState], node_id: int) -> int:
    if len(clusters) != 1:
        print(
            f"group-replay broker: --node needs one cluster (name its id); {len(clusters)} running",
            file=sys.stderr,
        )
        return 2
    [cluster] = clusters
    if not 1 <= node_id <= len(cluster.nodes):
        nodes = len(cluster.nodes)
        print(f"group-replay broker: the cluster has nodes 1-{nodes}, not {node_id}", file=sys.stderr)
        return 2
    pid = cluster.nodes[node_id - 1].pid
    if not pid_alive(pid):
        print(f"node {node_id} of cluster {cluster.id} is not running")
        return 0
    os.kill(pid, signal.SIGKILL)
    print(f"killed node {node_id} (pid {pid}) of cluster {cluster.id}")
    return 0


def _status(args: argparse.Namespace) -> int:
    states = find_running(args.kafka_version)
    clusters = find_running_clusters(args.kafka_version)
    if args.format == "json":
        import json
        from dataclasses import asdict

        listed = [asdict(s) for s in states] + [{"kind": "cluster", **asdict(c)} for c in clusters]
        print(json.dumps(listed, indent=2))
    elif states or clusters:
        _print_table(states, clusters)
    else:
        print("no running brokers")
    return 0


def _port_problem(port: int | None) -> str | None:
    if port is None:
        return None
    if not 0 < port < 65536:
        return f"--port {port}: not a TCP port"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            return f"--port {port}: cannot listen there ({exc.strerror})"
    return None


_Started = TypeVar("_Started")


def _launched(
    args: argparse.Namespace,
    start: Callable[[ProgressCallback | None], _Started],
    on_failure: Callable[[], None] | None = None,
) -> tuple[_Started | None, int]:
    """`start` under the jar download's progress: (what it started, 0), or (None, exit code) after
    saying why: 2 for a setting the line refuses (ValueError), 1 for a broker or Maven failure."""
    try:
        description = f"fetching Kafka {args.kafka_version} jars"
        with download_progress(args.progress == "on", description) as progress:
            return start(progress), 0
    except ValueError as exc:
        code, reason = 2, str(exc)
    except (BrokerError, MavenError) as exc:
        code, reason = 1, str(exc)
    if on_failure is not None:
        on_failure()
    print(f"group-replay broker: {reason}", file=sys.stderr)
    return None, code


def _broker_spec(
    args: argparse.Namespace, settings: dict[str, str], secure_listeners: tuple[SecureListener, ...] = ()
) -> BrokerSpec:
    """The broker `start`'s options ask for (each node's, with --brokers N)."""
    return BrokerSpec(
        args.kafka_version,
        new_coordinator=args.new_coordinator,
        extra_config=settings,
        heap_mb=args.heap_mb,
        secure_listeners=secure_listeners,
    )


def _start(args: argparse.Namespace) -> int:
    reason = missing_tools()
    if reason:
        print(f"group-replay broker: cannot start Kafka: {reason}", file=sys.stderr)
        return 2
    try:
        line_for(args.kafka_version)
        settings = KAFKA_GROUP_DEFAULTS | _settings(args.settings)
    except ValueError as exc:
        print(f"group-replay broker: {exc}", file=sys.stderr)
        return 2
    problem = _port_problem(args.port)
    if problem is not None:
        print(f"group-replay broker: {problem}", file=sys.stderr)
        return 2
    if args.brokers < 1:
        print(f"group-replay broker: --brokers {args.brokers}: at least 1", file=sys.stderr)
        return 2
    if args.brokers > 1 or args.security != Security.PLAINTEXT or args.provider == "container":
        return _start_cluster(args, settings)
    if args.users:
        print("group-replay broker: --user is for SASL listeners (--security sasl_*)", file=sys.stderr)
        return 2
    running = find_running(args.kafka_version)
    if running:
        print(f"Kafka {args.kafka_version} already running at {running[0].bootstrap} (id {running[0].pid})")
        return 0
    broker, code = _launched(
        args,
        lambda progress: start_broker(
            _broker_spec(args, settings),
            port=args.port,
            detach=True,
            progress=progress,
        ),
    )
    if broker is None:
        return code
    path = write_state(broker.state())
    print(broker.bootstrap)
    print(
        f"Kafka {broker.kafka_version} id {broker.pid}; state {path}; log {broker.log_path}; "
        f"stop it with `group-replay broker stop {broker.pid}`",
        file=sys.stderr,
    )
    return 0


def _start_cluster(args: argparse.Namespace, settings: dict[str, str]) -> int:
    """`start --brokers N` / `--security`: N detached KRaft nodes with the asked client listener."""
    if args.port is not None:
        print("group-replay broker: --port is for a single PLAINTEXT broker", file=sys.stderr)
        return 2
    try:
        security = Security(args.security)
        users = tuple(parse_user(text) for text in args.users)
        line = line_for(args.kafka_version)
    except ValueError as exc:
        print(f"group-replay broker: {exc}", file=sys.stderr)
        return 2
    if line.mode is not Mode.KRAFT:
        print(
            f"group-replay broker: clusters and secured listeners need a KRaft line (3.3+), not "
            f"Kafka {args.kafka_version}",
            file=sys.stderr,
        )
        return 2
    running = find_running_clusters(args.kafka_version)
    if running:
        print(
            f"Kafka {args.kafka_version} cluster already running at {running[0].bootstrap} "
            f"(id {running[0].id}; client config {running[0].client_config})"
        )
        return 0
    directory = cluster_directory(args.kafka_version)
    shutil.rmtree(directory, ignore_errors=True)  # leftovers of a cluster that died
    if args.provider == "container":
        return _start_container_cluster(args, settings, security, directory)
    try:
        setup = prepare(directory, security, args.sasl_mechanism, users)
    except ValueError as exc:
        shutil.rmtree(directory, ignore_errors=True)
        print(f"group-replay broker: {exc}", file=sys.stderr)
        return 2
    except CertError as exc:
        shutil.rmtree(directory, ignore_errors=True)
        print(f"group-replay broker: cannot make certificates: {exc}", file=sys.stderr)
        return 1
    cluster, code = _launched(
        args,
        lambda progress: start_cluster(
            _broker_spec(args, settings, () if setup.listener is None else (setup.listener,)),
            args.brokers,
            progress=progress,
            detach=True,
            work_root=directory,
        ),
        on_failure=lambda: shutil.rmtree(directory, ignore_errors=True),
    )
    if cluster is None:
        return code
    bootstrap = (
        cluster.bootstrap if setup.listener is None else cluster.listener_bootstrap(setup.listener.name)
    )
    state = ClusterState(
        kafka_version=args.kafka_version,
        id=cluster.nodes[0].pid,
        bootstrap=bootstrap,
        security=str(security),
        plaintext_bootstrap=cluster.bootstrap,
        directory=str(directory),
        client_config=str(setup.client_config),
        librdkafka_config=str(setup.librdkafka_config),
        started_at_ms=cluster.nodes[0].started_at_ms,
        nodes=tuple(broker.state() for broker in cluster.nodes),
    )
    path = write_cluster_state(state)
    print(bootstrap)
    ca = f"; CA {setup.ca}" if setup.ca else ""
    print(
        f"Kafka {args.kafka_version} cluster of {args.brokers} nodes, id {state.id}, {security} "
        f"listener; client config {setup.client_config} (librdkafka: {setup.librdkafka_config}){ca}; "
        f"PLAINTEXT (inside) {cluster.bootstrap}; state {path}; stop it with "
        f"`group-replay broker stop {state.id}`",
        file=sys.stderr,
    )
    return 0
