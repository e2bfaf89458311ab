"""A real Prometheus scrapes the agent's endpoint over TLS with basic auth and client certificates,
and TLS curve preferences restrict the key exchange (the web config over other clients:
test_webconfig_tls.py)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from support.patience import hang_guard
from support.pki import PASSWORD, USER, Pki, client_context, get, refused
from support.webconfigkit import PROMETHEUS, serve, tls_config
from warpwatch.serving.webfile import load_web_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _targets(url: str) -> dict[str, dict[str, Any]]:
    with urllib.request.urlopen(url + "/api/v1/targets", timeout=5) as resp:
        doc = json.load(resp)
    return {t["labels"]["job"]: t for t in doc["data"]["activeTargets"]}


@pytest.mark.slow
def test_prometheus_scrapes_over_tls_with_basic_auth(pki: Pki, tmp_path: Path) -> None:
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus); CI installs it")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain_tls = load_web_config(tls_config(pki, tmp_path / "a"))
    mutual_tls = load_web_config(
        tls_config(pki, tmp_path / "b", f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n")
    )
    with serve(plain_tls) as port_a, serve(mutual_tls) as port_b:
        cert = f"cert_file: {pki.client_crt}, key_file: {pki.client_key}, "
        jobs = {
            "tls_good": (port_a, "", PASSWORD),
            "tls_wrong_password": (port_a, "", "wrong"),
            "mtls_good": (port_b, cert, PASSWORD),
            "mtls_no_client_cert": (port_b, "", PASSWORD),
        }
        scrape = "".join(
            f"  - job_name: {job}\n    scheme: https\n    tls_config: {{{c}ca_file: {pki.ca}}}\n"
            f"    basic_auth: {{username: {USER}, password: {pw}}}\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
            for job, (port, c, pw) in jobs.items()
        )
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" + scrape
        )
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with (tmp_path / "prometheus.log").open("w") as log:
            proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + hang_guard()
                targets: dict[str, dict[str, Any]] = {}
                while time.monotonic() < deadline:  # until every target is in the state asserted below
                    if proc.poll() is not None:
                        break
                    with contextlib.suppress(OSError, ValueError):
                        targets = _targets(url)
                        if _as_expected(targets):
                            break
                    time.sleep(0.25)
                assert proc.poll() is None, "prometheus exited:\n" + (tmp_path / "prometheus.log").read_text()[-3000:]
            finally:
                proc.terminate()
                proc.wait(15)
    assert set(targets) == {"tls_good", "tls_wrong_password", "mtls_good", "mtls_no_client_cert"}, targets
    assert targets["tls_good"]["health"] == "up", targets["tls_good"]["lastError"]
    assert targets["mtls_good"]["health"] == "up", targets["mtls_good"]["lastError"]
    assert targets["tls_wrong_password"]["health"] == "down"
    assert "401" in targets["tls_wrong_password"]["lastError"]
    assert targets["mtls_no_client_cert"]["health"] == "down"
    assert "certificate required" in targets["mtls_no_client_cert"]["lastError"]


def _as_expected(targets: dict[str, dict[str, Any]]) -> bool:
    """The four targets as test_prometheus_scrapes_over_tls_with_basic_auth asserts them. A scrape
    that a loaded machine made miss Prometheus's scrape timeout leaves a good target down until the
    next: the wait goes on through it."""
    try:
        return (
            set(targets) == {"tls_good", "tls_wrong_password", "mtls_good", "mtls_no_client_cert"}
            and targets["tls_good"]["health"] == targets["mtls_good"]["health"] == "up"
            and targets["tls_wrong_password"]["health"] == targets["mtls_no_client_cert"]["health"] == "down"
            and "401" in targets["tls_wrong_password"]["lastError"]
            and "certificate required" in targets["mtls_no_client_cert"]["lastError"]
        )
    except KeyError:
        return False


@pytest.mark.slow
def test_curve_preferences_restrict_the_key_exchange(pki: Pki, tmp_path: Path) -> None:
    cfg = load_web_config(tls_config(pki, tmp_path, "  curve_preferences: [CurveP384]\n", users=False))
    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        assert get(url, client_context(pki)).status == 200
        x25519_only = client_context(pki)
        x25519_only.set_ecdh_curve("X25519")
        refused(url, x25519_only)
