"""TLS on each leg of the proxy, with certificates that reload without a restart (issue 12).

Client leg (`ClientTls`): the proxy terminates TLS with a PEM certificate chain and key; every
listener (bootstrap and per broker) serves it. Upstream leg (`UpstreamTls`): the proxy
originates TLS to every broker, trusting a CA bundle (the system's when none is given), checking
the broker's host name by default, and presenting its own client certificate when one is given.
Flags are named by leg (`--client-tls-*`, `--upstream-tls-*`).

Reloading (`TlsContexts.reload`, on SIGHUP and when a file's mtime/size changes): the client
leg's certificate is loaded into the same `ssl.SSLContext` the listeners hold, so the next
handshake presents it while established connections keep the session they negotiated (OpenSSL
copies the certificate into each connection when it is created); the upstream leg gets a fresh
context that the next upstream connection uses. A reload that fails (a half-written file, a key
that does not match) keeps the previous certificates and says why.

A decoding proxy terminates the client's TLS, so it cannot present the client's certificate to
the broker: clusters that authenticate clients by certificate (mTLS, `ssl.client.auth=required`)
see the proxy's certificate, or none. `MTLS_ADVICE` is what the proxy says when a broker refuses
it for that reason.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("group_replay.proxy")

MTLS_ADVICE = (
    "the broker asks for a client certificate (mTLS): a decoding proxy terminates the client's TLS and "
    "cannot forward the client's certificate. Give the proxy a certificate of its own the broker trusts "
    "(--upstream-tls-cert/--upstream-tls-key; ACLs then see the proxy's principal), or point the proxy at "
    "a SASL_SSL, SASL_PLAINTEXT or PLAINTEXT listener inside the network, where the broker still "
    "authenticates every client (SASL is relayed unchanged)"
)


class TlsConfigError(ValueError):
    """A TLS setting that cannot work (missing file, key that does not match its certificate)."""


@dataclass(frozen=True, slots=True)
class ClientTls:
    """The client leg: the proxy is the TLS server."""

    cert_path: Path  # PEM: the certificate chain, leaf first (may also hold the key)
    key_path: Path | None = None  # PEM private key (None: in cert_path)


@dataclass(frozen=True, slots=True)
class UpstreamTls:
    """The upstream leg: the proxy is the TLS client."""

    ca_path: Path | None = None  # PEM CA bundle (None: the system's trust store)
    cert_path: Path | None = None  # the proxy's own client certificate (brokers with ssl.client.auth)
    key_path: Path | None = None
    verify_hostname: bool = True


def _need(path: Path | None, what: str) -> None:
    if path is not None and not path.is_file():
        raise TlsConfigError(f"{what} {path}: no such file")


def client_context(settings: ClientTls, context: ssl.SSLContext | None = None) -> ssl.SSLContext:
    """The listeners' server context (a new one, or `context` with the certificate reloaded)."""
    _need(settings.cert_path, "client-leg certificate")
    _need(settings.key_path, "client-leg key")
    if context is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(
            str(settings.cert_path), None if settings.key_path is None else str(settings.key_path)
        )
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(
            f"client-leg certificate {settings.cert_path} / key {settings.key_path}: {exc}"
        ) from exc
    return context


def upstream_context(settings: UpstreamTls) -> ssl.SSLContext:
    """A fresh client context for connections to the brokers."""
    _need(settings.ca_path, "upstream CA bundle")
    _need(settings.cert_path, "upstream client certificate")
    _need(settings.key_path, "upstream client key")
    if settings.key_path is not None and settings.cert_path is None:
        raise TlsConfigError("--upstream-tls-key needs --upstream-tls-cert")
    context = ssl.create_default_context(cafile=None if settings.ca_path is None else str(settings.ca_path))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = settings.verify_hostname
    try:
        if settings.cert_path is not None:
            key = None if settings.key_path is None else str(settings.key_path)
            context.load_cert_chain(str(settings.cert_path), key)
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(f"upstream client certificate {settings.cert_path}: {exc}") from exc
    return context


def _stamp(paths: list[Path]) -> tuple[tuple[int, int] | None, ...]:
    stamps: list[tuple[int, int] | None] = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            stamps.append(None)
            continue
        stamps.append((stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)


class TlsContexts:
    """The proxy's TLS contexts for both legs, and their reloading.

    `client` is the one server context every listener holds (reloaded in place); `upstream` is
    replaced on reload (read it for each new upstream connection). `changed()` tells whether any
    file changed since the last (re)load; `reload()` loads them again and returns what it did.
    """

    def __init__(self, client: ClientTls | None, upstream: UpstreamTls | None) -> None:
        self.client_settings = client
        self.upstream_settings = upstream
        self.client: ssl.SSLContext | None = None if client is None else client_context(client)
        self.upstream: ssl.SSLContext | None = None if upstream is None else upstream_context(upstream)
        self.reloads = 0
        self._stamps = _stamp(self._paths())

    def _paths(self) -> list[Path]:
        paths: list[Path | None] = []
        if self.client_settings is not None:
            paths += [self.client_settings.cert_path, self.client_settings.key_path]
        if self.upstream_settings is not None:
            settings = self.upstream_settings
            paths += [settings.ca_path, settings.cert_path, settings.key_path]
        return [path for path in paths if path is not None]

    @property
    def enabled(self) -> bool:
        return self.client is not None or self.upstream is not None

    def changed(self) -> bool:
        return _stamp(self._paths()) != self._stamps

    def reload(self) -> str:
        """Load every certificate, key and CA bundle again; a failure keeps the previous ones and
        is reported in the returned line (never raised: the proxy keeps serving)."""
        stamps = _stamp(self._paths())
        try:
            upstream = None if self.upstream_settings is None else upstream_context(self.upstream_settings)
            if self.client_settings is not None:
                # Check the new pair on a scratch context first: a failed load_cert_chain must not
                # leave the listeners' context half-changed.
                client_context(self.client_settings)
                assert self.client is not None
                client_context(self.client_settings, self.client)
        except TlsConfigError as exc:
            self._stamps = stamps  # report a broken file once, not at every check
            return f"TLS reload failed, keeping the previous certificates: {exc}"
        if upstream is not None:
            self.upstream = upstream
        self._stamps = stamps
        self.reloads += 1
        return f"TLS certificates reloaded ({', '.join(str(p) for p in self._paths())})"


def is_client_certificate_refusal(exc: BaseException) -> bool:
    """Whether a broker's TLS alert means it wanted a (different) client certificate."""
    text = str(exc).lower()
    return isinstance(exc, ssl.SSLError) and (
        "certificate required" in text
        or "certificate_required" in text
        or "bad certificate" in text
        or "unknown ca" in text
    )


def explain_upstream_error(exc: BaseException) -> str:
    """An upstream connection error, with what to do when it is a TLS one."""
    if is_client_certificate_refusal(exc):
        return f"{exc}; {MTLS_ADVICE}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"{exc} (the broker's certificate: give its CA with --upstream-tls-ca; when it names another "
            "host than the one the proxy connects to, --upstream-tls-no-verify-hostname)"
        )
    if isinstance(exc, ssl.SSLError) and "wrong version number" in str(exc).lower():
        return f"{exc} (is this upstream listener TLS at all? drop --upstream-tls-* for a PLAINTEXT one)"
    return str(exc)


__all__ = [
    "MTLS_ADVICE",
    "ClientTls",
    "TlsConfigError",
    "TlsContexts",
    "UpstreamTls",
    "client_context",
    "explain_upstream_error",
    "is_client_certificate_refusal",
    "upstream_context",
]
