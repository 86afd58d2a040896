"""A listener's client security for every client kind of the demo group, from one properties file.

`group-replay broker start --security ...` writes `librdkafka.properties` beside the cluster's
certificates (`security.protocol`, `ssl.ca.location`, `sasl.mechanisms`, `sasl.username`,
`sasl.password`: librdkafka's names). `ClientSecurity.read(path)` takes that file and spells the
same settings for each client: librdkafka's names as they are, kafka-python's and aiokafka's
keyword arguments, and a Java properties file (kafka-clients' names; the CA as a PKCS12
truststore made with keytool, since PEM truststores came only with Kafka 2.7's KIP-651 and the
demo runs a 2.4.1 Java client).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KNOWN = (
    "security.protocol",
    "ssl.ca.location",
    "sasl.mechanisms",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
)
_TRUSTSTORE_PASSWORD = "group-replay"  # protects nothing secret: the CA certificate is public


def read_properties(path: Path) -> dict[str, str]:
    """`key=value` lines (`#` comments and blank lines skipped); ValueError naming file:line."""
    settings: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{path}:{number}: not key=value")
        settings[key.strip()] = value.strip()
    return settings


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches the listener: protocol, the CA to trust (TLS), the SASL login."""

    protocol: str = "PLAINTEXT"
    ca: str | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    @classmethod
    def read(cls, path: Path) -> ClientSecurity:
        """From a librdkafka-named properties file; ValueError (file:key: why) for what it cannot use."""
        settings = read_properties(path)
        unknown = sorted(set(settings) - set(KNOWN))
        if unknown:
            takes = ", ".join(KNOWN)
            raise ValueError(f"{path}: {unknown[0]}: not a setting the demo clients take ({takes})")
        protocol = settings.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise ValueError(f"{path}: security.protocol: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        mechanism = settings.get("sasl.mechanisms", settings.get("sasl.mechanism"))
        security = cls(
            protocol,
            settings.get("ssl.ca.location"),
            mechanism,
            settings.get("sasl.username"),
            settings.get("sasl.password"),
        )
        login = mechanism in MECHANISMS and security.username and security.password is not None
        if security.sasl and not login:
            raise ValueError(
                f"{path}: {protocol} needs sasl.mechanisms (one of {', '.join(MECHANISMS)}), "
                "sasl.username and sasl.password"
            )
        return security

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def librdkafka(self) -> dict[str, str]:
        out = {"security.protocol": self.protocol}
        if self.tls and self.ca:
            out["ssl.ca.location"] = self.ca
        if self.sasl:
            out |= {
                "sasl.mechanisms": str(self.mechanism),
                "sasl.username": str(self.username),
                "sasl.password": str(self.password),
            }
        return out

    def python(self, kind: str) -> dict[str, Any]:
        """kafka-python's (`kind` "kafka-python") or aiokafka's keyword arguments."""
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            if kind == "aiokafka":
                from aiokafka.helpers import create_ssl_context

                out["ssl_context"] = create_ssl_context(cafile=self.ca)
            else:
                out["ssl_cafile"] = self.ca
                out["ssl_check_hostname"] = True
        if self.sasl:
            out |= {
                "sasl_mechanism": self.mechanism,
                "sasl_plain_username": self.username,
                "sasl_plain_password": self.password,
            }
        return out

    def java_properties(self, directory: Path) -> Path:
        """kafka-clients' settings in a file under `directory` (mode 0600: it holds the password)."""
        directory.mkdir(parents=True, exist_ok=True)
        lines = [f"security.protocol={self.protocol}"]
        if self.tls and self.ca:
            lines += [
                "ssl.truststore.type=PKCS12",
                f"ssl.truststore.location={self._truststore(directory)}",
                f"ssl.truststore.password={_TRUSTSTORE_PASSWORD}",
            ]
        if self.sasl:
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if self.mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            login = f'{module} required username="{self.username}" password="{self.password}";'
            lines += [f"sasl.mechanism={self.mechanism}", f"sasl.jaas.config={login}"]
        text = "".join(f"{line}\n" for line in lines)
        path = directory / f"java-{hashlib.sha256(text.encode()).hexdigest()[:12]}.properties"
        path.touch(mode=0o600)
        path.write_text(text)
        return path

    def _truststore(self, directory: Path) -> Path:
        assert self.ca is not None
        ca = Path(self.ca).read_bytes()
        store = directory / f"truststore-{hashlib.sha256(ca).hexdigest()[:12]}.p12"
        if store.exists():
            return store
        keytool = shutil.which("keytool")
        if keytool is None:
            raise ValueError("keytool not found on PATH: the Java clients' truststore needs a JDK")
        partial = store.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        result = subprocess.run(
            [
                keytool,
                "-importcert",
                "-noprompt",
                "-alias",
                "ca",
                "-file",
                str(self.ca),
                "-keystore",
                str(partial),
                "-storetype",
                "PKCS12",
                "-storepass",
                _TRUSTSTORE_PASSWORD,
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ValueError(f"keytool could not import {self.ca}: {result.stdout}{result.stderr}")
        partial.rename(store)
        return store


__all__ = ["ClientSecurity", "read_properties"]
