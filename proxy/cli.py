"""`group-replay proxy`: run the recording proxy in front of a Kafka cluster."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from group_replay import add_enum_option, stop_on_signals
from proxy.capture.header import RecordScope
from proxy.server import ProxyConfig, ProxyServer, parse_hostport
from proxy.session import DEFAULT_MAX_BUFFERED_BYTES
from proxy.tls import ClientTls, TlsConfigError, TlsContexts, UpstreamTls
from proxy.upstream import describe_upstream
from proxy.wire import DEFAULT_MAX_FRAME_BYTES

log = logging.getLogger("group_replay.proxy")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="group-replay proxy",
        description="Transparent Kafka proxy: relays every byte, decodes the group APIs, records to pcapng.",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="read these settings from a YAML file (proxy.config_file: keys are the flags' names "
        "with underscores, client_tls/upstream_tls per leg); flags given here override it",
    )
    parser.add_argument(
        "--upstream", metavar="HOST:PORT", help="bootstrap broker (required, here or in --config)"
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:19092",
        metavar="HOST:PORT",
        help="bootstrap listener (default %(default)s)",
    )
    parser.add_argument("--advertise-host", default=None, help="host named in rewritten broker addresses")
    parser.add_argument("--record", metavar="FILE", help="write a pcapng capture (see --record-scope)")
    add_enum_option(
        parser,
        "--record-scope",
        RecordScope.GROUP,
        help="group (default): record the group APIs, ApiVersions, Metadata, FindCoordinator, "
        "DescribeCluster and SASL (redacted) in full, every other frame (Produce, Fetch, ...) as its "
        "header only, in a packet that keeps the frame's length; all: every frame in full",
    )
    parser.add_argument("--policy", metavar="FILE", help="rewrite policy YAML (proxy.rewrite)")
    parser.add_argument(
        "--max-frame-bytes",
        type=int,
        default=DEFAULT_MAX_FRAME_BYTES,
        metavar="N",
        help="close connections that announce larger frames (default %(default)s)",
    )
    parser.add_argument(
        "--max-buffered-bytes",
        type=int,
        default=DEFAULT_MAX_BUFFERED_BYTES,
        metavar="N",
        help="bytes of partial frames all connections may hold together; a frame that would pass it "
        "closes its connection (default %(default)s)",
    )
    client_tls = parser.add_argument_group(
        "client leg TLS (clients -> proxy)",
        "the proxy terminates TLS on every listener; certificates reload on SIGHUP and when the files change",
    )
    client_tls.add_argument(
        "--client-tls-cert", type=Path, metavar="PEM", help="certificate chain, leaf first"
    )
    client_tls.add_argument("--client-tls-key", type=Path, metavar="PEM", help="its private key")
    upstream_tls = parser.add_argument_group(
        "upstream leg TLS (proxy -> brokers)",
        "the proxy originates TLS to every broker. A broker that authenticates clients by certificate "
        "(mTLS) sees the proxy's certificate, never the client's: a decoding proxy cannot forward it. "
        "Use a SASL or PLAINTEXT listener inside the network for such clusters (SASL is relayed).",
    )
    upstream_tls.add_argument("--upstream-tls", action="store_true", help="TLS with the system's trust store")
    upstream_tls.add_argument("--upstream-tls-ca", type=Path, metavar="PEM", help="CA bundle (implies TLS)")
    upstream_tls.add_argument(
        "--upstream-tls-cert",
        type=Path,
        metavar="PEM",
        help="the proxy's own client certificate (implies TLS)",
    )
    upstream_tls.add_argument("--upstream-tls-key", type=Path, metavar="PEM", help="its private key")
    upstream_tls.add_argument(
        "--upstream-tls-no-verify-hostname",
        action="store_true",
        help="accept a broker certificate that names another host (the chain is still verified)",
    )
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics at /metrics and health checks at /health/live, /health/ready",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default %(default)s)",
    )
    return parser


def _tls(args: argparse.Namespace) -> TlsContexts | None:
    """The TLS contexts the flags ask for (None: PLAINTEXT on both legs). Raises TlsConfigError."""
    client = None
    if args.client_tls_cert is not None:
        client = ClientTls(args.client_tls_cert, args.client_tls_key)
    elif args.client_tls_key is not None:
        raise TlsConfigError("--client-tls-key needs --client-tls-cert")
    upstream = None
    if (
        args.upstream_tls
        or args.upstream_tls_ca is not None
        or args.upstream_tls_cert is not None
        or args.upstream_tls_key is not None
        or args.upstream_tls_no_verify_hostname
    ):
        upstream = UpstreamTls(
            args.upstream_tls_ca,
            args.upstream_tls_cert,
            args.upstream_tls_key,
            verify_hostname=not args.upstream_tls_no_verify_hostname,
        )
    if client is None and upstream is None:
        return None
    return TlsContexts(client, upstream)


def _load_policy(path: str) -> Any:
    try:
        rewrite = importlib.import_module("proxy.rewrite")
        load = rewrite.load_policy
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"group-replay proxy: --policy is not available ({exc})") from exc
    return load(path)


async def _run(config: ProxyConfig, record: str | None, record_scope: RecordScope) -> None:
    recorder = None
    upstream = "{}:{}".format(*config.upstream)
    # Once at start: is the upstream there, and (for the capture) what are its group settings?
    tls = config.tls.upstream if config.tls is not None else None
    settings = await describe_upstream(*config.upstream, tls=tls)
    if settings.unknown_reason is not None:
        log.warning("upstream group settings unknown: %s", settings.unknown_reason)
    else:
        log.info(
            "upstream %s: Kafka %s, group settings %s", upstream, settings.broker_version, settings.configs
        )
    if record:
        from proxy.capture.writer import CaptureWriter

        recorder = CaptureWriter(
            record,
            upstream=upstream,
            policy=config.policy.name,
            group_settings=settings,
            record_scope=record_scope,
        )
        await asyncio.to_thread(recorder.wait_ready)  # its start-up off the clients' time
    server = ProxyServer(config, recorder)
    if settings.broker_version is None:  # nothing answered: per-client failures now report with backoff
        server.upstream_failed(config.upstream, settings.unknown_reason or "no answer")
    try:
        stop = stop_on_signals()  # before the "listening" line supervisors wait for
        loop = asyncio.get_running_loop()
        if config.tls is not None:
            with contextlib.suppress(NotImplementedError, AttributeError):
                loop.add_signal_handler(signal.SIGHUP, server.reload_tls)
        host, port = await server.start()
        print(f"proxy listening on {host}:{port} -> {config.upstream[0]}:{config.upstream[1]}", flush=True)
        if server.metrics_address is not None:
            print("metrics on http://{}:{}/metrics".format(*server.metrics_address), flush=True)
        await stop.wait()
    finally:
        await server.close()
        if recorder is not None:
            recorder.close()
        _print_summary(server, recorder)


def _print_summary(server: ProxyServer, recorder: Any | None) -> None:
    stats = server.summary()
    line = (
        f"proxy stopped: {stats.connections} connections, {stats.requests + stats.responses} frames "
        f"({stats.requests} requests), {stats.group_requests} group API requests, {stats.rewrites} rewrites, "
        f"{stats.closed_on_error} connections closed on bad input"
    )
    if recorder is not None:
        size = recorder.path.stat().st_size if recorder.path.exists() else 0
        line += f"; capture {recorder.path} ({size} bytes), record scope {recorder.record_scope}"
        if recorder.error is not None:
            line += f"; capture writer error: {recorder.error}"
    print(line, flush=True)


def _given(argv: list[str]) -> set[str]:
    """The destinations the command line set itself (they override --config)."""
    quiet = _parser()
    for action in quiet._actions:
        action.default = argparse.SUPPRESS
    return set(vars(quiet.parse_args(argv)))


def main(argv: list[str]) -> int:  # noqa: C901 - the command's option checks in the order a user meets them, each with its exit code
    parser = _parser()
    args = parser.parse_args(argv)
    if args.config is not None:
        from proxy.config_file import load as load_config
        from proxy.yaml_reader import YamlInputError

        try:
            from_file = load_config(args.config)
        except YamlInputError as exc:
            print(f"group-replay proxy: {exc}", file=sys.stderr)
            return 2
        given = _given(argv)
        for dest, value in from_file.items():
            if dest not in given:
                setattr(args, dest, value)
    if args.upstream is None:
        print(
            "group-replay proxy: --upstream HOST:PORT is required (or `upstream:` in --config)",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        upstream = parse_hostport(args.upstream)
        listen = parse_hostport(args.listen)
        metrics = None if args.metrics is None else parse_hostport(args.metrics)
    except ValueError as exc:
        print(f"group-replay proxy: {exc}", file=sys.stderr)
        return 2
    if args.max_frame_bytes <= 0 or args.max_buffered_bytes <= 0:
        print(
            "group-replay proxy: --max-frame-bytes and --max-buffered-bytes must be positive", file=sys.stderr
        )
        return 2
    config = ProxyConfig(
        upstream=upstream,
        listen=listen,
        advertised_host=args.advertise_host,
        max_frame_bytes=args.max_frame_bytes,
        max_buffered_bytes=args.max_buffered_bytes,
        metrics=metrics,
    )
    try:
        config.tls = _tls(args)
    except TlsConfigError as exc:
        print(f"group-replay proxy: {exc}", file=sys.stderr)
        return 2
    if args.policy:
        try:
            policy = _load_policy(args.policy)
        except ValueError as exc:  # proxy.rewrite.PolicyError names the file, line and field
            print(f"group-replay proxy: {exc}", file=sys.stderr)
            return 2
        config.policy = policy
        for change in policy.api_versions_changes():  # issue 13: every capped API key, named
            print(f"group-replay proxy: policy {policy.name}: ApiVersions {change}", file=sys.stderr)
    try:
        asyncio.run(_run(config, args.record, RecordScope(args.record_scope)))
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        return 130
    except OSError as exc:
        print(f"group-replay proxy: {exc}", file=sys.stderr)
        return 2
    return 0
