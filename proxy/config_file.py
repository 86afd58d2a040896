"""`group-replay proxy --config proxy.yaml`: the proxy's flags as a YAML file (issue 12).

Read with `proxy.yaml_reader`, so every error names the file, line and field and the CLI exits 2.
Keys are the long flags without dashes, underscores for dashes; TLS per leg is a mapping named by
its leg; relative paths are the config file's directory's. Flags given on the command line
override the file:

    upstream: broker1:9093
    listen: 127.0.0.1:19092
    advertise_host: proxy.example.com
    record: capture.pcapng
    record_scope: group            # group | all
    policy: rewrite.yaml
    metrics: 127.0.0.1:9464
    max_frame_bytes: 104857600
    max_buffered_bytes: 268435456
    log_level: INFO
    client_tls: {cert: proxy.pem, key: proxy.key}
    upstream_tls: {ca: ca.pem, cert: proxy-client.pem, key: proxy-client.key, verify_hostname: true}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.capture.header import RecordScope
from proxy.server import parse_hostport
from proxy.yaml_reader import YamlInputError, YamlReader, compose, read_text

TOP_KEYS = (
    "upstream", "listen", "advertise_host", "record", "record_scope", "policy", "metrics",
    "max_frame_bytes", "max_buffered_bytes", "log_level", "client_tls", "upstream_tls",
)  # fmt: skip
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class ProxyConfigError(YamlInputError):
    """A proxy config file that is not valid (`file:line: field: message`)."""


def load(path: str | Path) -> dict[str, Any]:
    """The file's settings as `group-replay proxy`'s argparse destinations and value types."""
    source = str(path)
    node = compose(read_text(path, ProxyConfigError), source, ProxyConfigError)
    reader = YamlReader(source, ProxyConfigError)
    if node is None:
        return {}
    base = Path(path).resolve().parent
    out: dict[str, Any] = {}
    for key, value in reader.mapping(node, "", TOP_KEYS).items():
        match key:
            case "client_tls":
                leg = reader.mapping(value, key, ("cert", "key"), required=("cert", "key"))
                out["client_tls_cert"] = base / reader.string(leg["cert"], "client_tls.cert")
                out["client_tls_key"] = base / reader.string(leg["key"], "client_tls.key")
            case "upstream_tls":
                out |= _upstream_tls(reader, value, base)
            case _:
                out[key] = _setting(reader, key, value, base)
    return out


def _setting(reader: YamlReader, key: str, value: Any, base: Path) -> Any:
    match key:
        case "upstream" | "listen" | "metrics":
            text = reader.string(value, key)
            try:
                parse_hostport(text)
            except ValueError as exc:
                raise reader.fail(value, key, str(exc)) from None
            return text
        case "record" | "policy":
            return str(base / reader.string(value, key))
        case "record_scope":
            return str(reader.choice(value, key, RecordScope))
        case "max_frame_bytes" | "max_buffered_bytes":
            return reader.integer(value, key, 1, 1 << 40)
        case "log_level":
            level = reader.string(value, key).upper()
            if level not in LOG_LEVELS:
                raise reader.fail(value, key, f"one of {', '.join(LOG_LEVELS)}")
            return level
    return reader.string(value, key)  # advertise_host


def _upstream_tls(reader: YamlReader, value: Any, base: Path) -> dict[str, Any]:
    leg = reader.mapping(value, "upstream_tls", ("ca", "cert", "key", "verify_hostname"))
    out: dict[str, Any] = {"upstream_tls": True}
    for name in ("ca", "cert", "key"):
        if name in leg:
            out[f"upstream_tls_{name}"] = base / reader.string(leg[name], f"upstream_tls.{name}")
    if "verify_hostname" in leg:
        verify = reader.boolean(leg["verify_hostname"], "upstream_tls.verify_hostname")
        out["upstream_tls_no_verify_hostname"] = not verify
    return out


__all__ = ["ProxyConfigError", "load"]
