"""Throwaway PEM certificates for TLS tests: a CA and leaf certificates it signs, made with `openssl`.

Kafka (2.7+) reads PEM key stores directly (`ssl.keystore.type=PEM`: the PKCS#8 key and the
chain in one file; `ssl.truststore.type=PEM`: the CA), as do librdkafka, Python's `ssl` and the
Java client, so no JKS/PKCS#12 conversion (keytool) is needed. Keys are EC P-256 (fast to make).
Leaf certificates name 127.0.0.1 and localhost, and serve as server and client certificates.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = 7


class CertError(RuntimeError):
    """openssl is missing or failed (its output is in the message)."""


@dataclass(frozen=True)
class Leaf:
    cert: Path  # the certificate followed by the CA's (a chain)
    key: Path  # PKCS#8, unencrypted
    bundle: Path  # key + chain in one file: a Kafka PEM key store

    @property
    def name(self) -> str:
        return self.cert.stem


@dataclass(frozen=True)
class CertAuthority:
    cert: Path
    key: Path

    def issue(self, name: str, directory: Path | None = None, common_name: str | None = None) -> Leaf:
        """A leaf certificate for 127.0.0.1/localhost signed by this CA."""
        directory = directory or self.cert.parent
        directory.mkdir(parents=True, exist_ok=True)
        key, csr, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.pem"
        _openssl(
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={common_name or name}",
        )  # fmt: skip
        extensions = directory / f"{name}.ext"
        extensions.write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        )
        leaf_only = directory / f"{name}.leaf.pem"
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-out", str(leaf_only), "-days", str(DAYS), "-sha256",
            "-extfile", str(extensions),
        )  # fmt: skip
        cert.write_text(leaf_only.read_text() + self.cert.read_text())
        bundle = directory / f"{name}.keystore.pem"
        bundle.write_text(key.read_text() + cert.read_text())
        for scratch in (csr, extensions, leaf_only):
            scratch.unlink()
        return Leaf(cert, key, bundle)


def make_ca(directory: Path, name: str = "ca") -> CertAuthority:
    """A self-signed CA in `directory` (`{name}.pem`, `{name}.key`)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(cert), "-days", str(DAYS), "-subj", f"/CN=group-replay test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return CertAuthority(cert, key)


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise CertError("openssl not found on PATH")
    result = subprocess.run([openssl, *args], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise CertError(f"openssl {args[0]} failed ({result.returncode}): {result.stderr[-1500:]}")


__all__ = ["CertAuthority", "CertError", "Leaf", "make_ca"]
