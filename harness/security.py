"""The client listener a user asks `group-replay broker start` for, and the files that reach it.

`--security plaintext|ssl|sasl_plaintext|sasl_ssl` (with `--sasl-mechanism` and `--user NAME:PASSWORD`)
becomes one `SecureListener` on every node (beside the PLAINTEXT listener the harness keeps for
readiness and inter-broker traffic), certificates made with `harness.certs` in the cluster's
directory (`ca.pem`; `broker.keystore.pem`; `proxy.pem`/`proxy.key`, a certificate a TLS proxy in
front of the cluster can present, signed by the same CA), and two client configurations for that
listener: `client.properties` (Java clients and Kafka's own tools: `--command-config`,
`--consumer.config`) and `librdkafka.properties` (confluent-kafka / librdkafka names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from harness.broker import SASL_MECHANISMS, SecureListener
from harness.certs import make_ca


class Security(StrEnum):
    """Kafka's SecurityProtocol names (lower case): SASL_ over the rest, _SSL for TLS."""

    PLAINTEXT = "plaintext"
    SSL = "ssl"
    SASL_PLAINTEXT = "sasl_plaintext"
    SASL_SSL = "sasl_ssl"

    @property
    def protocol(self) -> str:
        return self.value.upper()

    @property
    def tls(self) -> bool:
        return self.value.endswith("ssl")

    @property
    def sasl(self) -> bool:
        return self.value.startswith("sasl_")


# Characters the JAAS line (`user_NAME="PASSWORD"`) and StorageTool's `--add-scram
# MECH=[name=N,password=P]` cannot carry unquoted.
_CREDENTIAL = re.compile(r'[^\s"\\,\[\]=;]+')


def parse_user(text: str) -> tuple[str, str]:
    """`NAME:PASSWORD` -> (name, password); ValueError naming what is wrong."""
    name, sep, password = text.partition(":")
    if not sep or not name or not password:
        raise ValueError(f"--user wants NAME:PASSWORD, got {text.split(':')[0]!r}...")
    for what, value in (("name", name), ("password", password)):
        if not _CREDENTIAL.fullmatch(value):
            raise ValueError(f'--user {name}: the {what} may not contain spaces or any of " \\ , [ ] = ;')
    return name, password


@dataclass(frozen=True)
class ListenerSetup:
    security: Security
    listener: SecureListener | None  # None: plaintext (the harness's own PLAINTEXT listener)
    client_config: Path
    librdkafka_config: Path
    ca: Path | None


def prepare(
    directory: Path, security: Security, mechanism: str, users: tuple[tuple[str, str], ...]
) -> ListenerSetup:
    """Certificates (TLS) and client configs in `directory`; raises ValueError for a bad choice and
    harness.certs.CertError when openssl fails."""
    if security.sasl:
        if mechanism not in SASL_MECHANISMS:
            raise ValueError(f"--sasl-mechanism {mechanism}: one of {', '.join(SASL_MECHANISMS)}")
        if not users:
            raise ValueError(f"--security {security} needs at least one --user NAME:PASSWORD")
    elif users:
        raise ValueError(
            f"--user is for SASL listeners (--security sasl_ssl or sasl_plaintext), not {security}"
        )
    directory.mkdir(parents=True, exist_ok=True)
    java = {"security.protocol": security.protocol}
    native = {"security.protocol": security.value}
    listener = None
    ca_path = None
    if security.tls:
        certs = directory / "certs"
        ca = make_ca(certs)
        broker = ca.issue("broker", certs)
        ca.issue("proxy", certs)
        ca_path = ca.cert
        java |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.cert)}
        native |= {"ssl.ca.location": str(ca.cert)}
        tls = {"keystore_pem": str(broker.bundle), "truststore_pem": str(ca.cert)}
    else:
        tls = {}
    if security.sasl:
        name, password = users[0]
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        java |= {
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{module} required username="{name}" password="{password}";',
        }
        native |= {"sasl.mechanisms": mechanism, "sasl.username": name, "sasl.password": password}
    if security is not Security.PLAINTEXT:
        listener = SecureListener(
            security.protocol,
            mechanisms=(mechanism,) if security.sasl else (),
            users=users,
            **tls,  # type: ignore[arg-type]
        )
    client_config = directory / "client.properties"
    librdkafka_config = directory / "librdkafka.properties"
    for path, settings in ((client_config, java), (librdkafka_config, native)):
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        path.chmod(0o600)  # holds the first user's password
    return ListenerSetup(security, listener, client_config, librdkafka_config, ca_path)


__all__ = ["ListenerSetup", "Security", "parse_user", "prepare"]
