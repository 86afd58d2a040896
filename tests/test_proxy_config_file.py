"""`group-replay proxy --config proxy.yaml` (issue 12): settings from a YAML file, flags override
it, and a bad file names file, line and field with exit 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from group_replay import main as group_replay
from tests.support.proxy import ProxyProcess

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("upstream: b:9092\nbogus: 1\n", "proxy.yaml:2: bogus: unknown key"),
        ("upstream: nohostport\n", "proxy.yaml:1: upstream:"),
        ("upstream: b:9092\nrecord_scope: most\n", "proxy.yaml:2: record_scope:"),
        ("upstream: b:9092\nclient_tls: {cert: a.pem}\n", "client_tls.key: required key is missing"),
        ("upstream: b:9092\nupstream_tls: {verify_hostname: maybe}\n", "upstream_tls.verify_hostname"),
        ("upstream: b:9092\nmax_frame_bytes: -1\n", "proxy.yaml:2: max_frame_bytes: must be in"),
        ("upstream: [b:9092\n", "proxy.yaml"),
        ("listen: 127.0.0.1:0\n", "--upstream HOST:PORT is required"),
    ],
)
def test_bad_config_files_exit_2_naming_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(text)
    assert group_replay(["proxy", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_file_configures_the_proxy_and_flags_override_it(tmp_path: Path) -> None:
    port = _free_port()
    config_dir = tmp_path / "conf"
    config_dir.mkdir()
    (config_dir / "proxy.yaml").write_text(
        f"upstream: 127.0.0.1:{_free_port()}\n"  # nothing listens: the proxy still starts
        f"listen: 127.0.0.1:{port}\n"
        "record: capture.pcapng\n"  # relative to the file's directory
        "record_scope: all\n"
        "log_level: warning\n"
    )
    proxy = ProxyProcess(
        "--config", str(config_dir / "proxy.yaml"), "--record-scope", "group", listen=None, cwd=tmp_path
    )
    first = proxy.first_line
    try:
        assert f"proxy listening on 127.0.0.1:{port}" in first, first
    finally:
        stopped = proxy.stop()
    out = stopped.stdout
    assert stopped.returncode == 0
    assert f"capture {config_dir / 'capture.pcapng'}" in out and "record scope group" in out, out
    assert (config_dir / "capture.pcapng").exists()
