"""demo.security: the `librdkafka.properties` that `broker start --security` writes, spelled for
every client kind of the demo group; `group-replay demo group`'s input errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from demo.cli import main as demo_main
from demo.security import ClientSecurity
from harness.security import Security, prepare


def test_the_file_broker_start_writes_is_read_back_for_every_client(tmp_path: Path) -> None:
    setup = prepare(tmp_path, Security.SASL_SSL, "SCRAM-SHA-512", (("alice", "alice-secret"),))
    security = ClientSecurity.read(setup.librdkafka_config)
    assert security == ClientSecurity("SASL_SSL", str(setup.ca), "SCRAM-SHA-512", "alice", "alice-secret")
    assert security.librdkafka() == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(setup.ca),
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
    kafka_python = security.python("kafka-python")
    assert (
        kafka_python["ssl_cafile"] == str(setup.ca) and kafka_python["sasl_plain_password"] == "alice-secret"
    )
    aiokafka = security.python("aiokafka")
    assert aiokafka["ssl_context"].verify_mode.name == "CERT_REQUIRED" and "ssl_cafile" not in aiokafka


@pytest.mark.skipif(shutil.which("keytool") is None, reason="keytool (a JDK) is not installed")
def test_java_clients_get_a_pkcs12_truststore_and_a_jaas_login(tmp_path: Path) -> None:
    setup = prepare(tmp_path / "c", Security.SASL_SSL, "SCRAM-SHA-512", (("alice", "alice-secret"),))
    path = ClientSecurity.read(setup.librdkafka_config).java_properties(tmp_path / "java")
    text = path.read_text()
    assert path.stat().st_mode & 0o077 == 0  # it holds the password
    assert "sasl.mechanism=SCRAM-SHA-512" in text and 'password="alice-secret"' in text
    store = next(
        line.split("=", 1)[1] for line in text.splitlines() if line.startswith("ssl.truststore.location")
    )
    listed = subprocess.run(
        ["keytool", "-list", "-keystore", store, "-storetype", "PKCS12", "-storepass", "group-replay"],
        capture_output=True,
        text=True,
    )
    assert listed.returncode == 0 and "trustedCertEntry" in listed.stdout, listed.stdout + listed.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("security.protocol=SASL_SSL\n", "needs sasl.mechanisms"),
        ("security.protocol=TLS\n", "security.protocol: 'TLS' is not one of"),
        ("bootstrap.servers=x:1\n", "bootstrap.servers: not a setting the demo clients take"),
        ("just a line\n", ":1: not key=value"),
    ],
)
def test_bad_client_configs_exit_2_naming_what_is_wrong(
    tmp_path: Path, content: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.properties"
    config.write_text(content)
    code = demo_main(["group", "--bootstrap", "127.0.0.1:1", "--client-config", str(config)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err, err


def test_demo_group_from_the_command_line_names_a_missing_config(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "group_replay", "demo", "group", "--bootstrap", "127.0.0.1:1",
         "--client-config", str(tmp_path / "missing.properties")],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "missing.properties" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
