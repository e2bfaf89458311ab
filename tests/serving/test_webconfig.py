"""The exporter-toolkit web config: TLS and basic auth, checked with real servers and real clients.

Certificates are made by the `openssl` command line tool for each test session (a CA, a server
certificate for localhost/127.0.0.1, client certificates from that CA and from a foreign one).
A minimal ThreadingHTTPServer, secured by `secure_server` and guarded by `authorize`, is hit by
urllib, curl (when installed) and a real Prometheus (Debian package `prometheus`).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import http.client
import json
import logging
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from support.pki import CURL, HASH, PASSWORD, USER, Pki, basic, client_context, get, refused
from support.pki import make_leaf as _make_leaf
from support.tlsserver import secure_server
from warpwatch.errors import ConfigError
from warpwatch.logs import TextFormatter
from warpwatch.serving import basicauth
from warpwatch.serving.basicauth import authorize, check_basic_auth
from warpwatch.serving.tls import server_ssl_context
from warpwatch.serving.webconfig import WebConfig
from warpwatch.serving.webfile import load_web_config

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

METRICS = b"# TYPE webconfig_test gauge\nwebconfig_test 1\n"


# ---------------------------------------------------------------------------------------------
# Certificates


def write_config(tmp_path: Path, text: str, name: str = "web-config.yml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def tls_config(pki: Pki, tmp_path: Path, extra_tls: str = "", rest: str = "", users: bool = True) -> Path:
    """A config with TLS (absolute paths), the test user unless `users` is False, and more YAML."""
    text = (f"tls_server_config:\n  cert_file: {pki.server_crt}\n  key_file: {pki.server_key}\n{extra_tls}"
            + (f"basic_auth_users:\n  {USER}: {HASH}\n" if users else "") + rest)
    return write_config(tmp_path, text)


# ---------------------------------------------------------------------------------------------
# A minimal server and clients


def _handler(cfg: WebConfig) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            allowed, extra = authorize(cfg, self.headers)
            if not allowed:
                code, body = 401, b"unauthorized\n"
            elif self.path == "/metrics":
                code, body = 200, METRICS
            else:
                code, body = 404, b"not found\n"
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextlib.contextmanager
def serve(cfg: WebConfig, **kwargs: Any) -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(cfg))
    server.daemon_threads = True
    secure_server(server, cfg, **kwargs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# ---------------------------------------------------------------------------------------------
# Loading


def test_full_config_loads_with_relative_paths_resolved_against_the_file(
        pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    for p in (pki.server_crt, pki.server_key, pki.ca):
        shutil.copy(p, conf_dir / p.name)
    path = write_config(conf_dir, f"""
tls_server_config:
  cert_file: server.crt
  key_file: ./server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.crt
  client_allowed_sans: [prometheus.test]
  min_version: TLS12
  max_version: TLS13
  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]
  prefer_server_cipher_suites: true
  curve_preferences: [CurveP256]
http_server_config:
  http2: false
  headers:
    X-Frame-Options: deny
    X-Content-Type-Options: nosniff
    Strict-Transport-Security: max-age=31536000
    Content-Security-Policy: ""
basic_auth_users:
  {USER}: {HASH}
  other: {HASH.replace("$2b$", "$2y$")}
""")
    monkeypatch.chdir(tmp_path)  # relative to the file, not to the working directory
    cfg = load_web_config(Path("etc") / "web-config.yml")
    assert cfg.path == path
    assert cfg.tls is not None
    assert cfg.tls.cert_file == conf_dir / "server.crt"
    assert cfg.tls.key_file == conf_dir / "server.key"
    assert cfg.tls.client_ca_file == conf_dir / "ca.crt"
    assert cfg.tls.client_auth_type == "RequireAndVerifyClientCert"
    assert cfg.tls.client_allowed_sans == ("prometheus.test",)
    assert cfg.headers == (("X-Frame-Options", "deny"), ("X-Content-Type-Options", "nosniff"),
                           ("Strict-Transport-Security", "max-age=31536000"))
    assert cfg.http2 is False
    assert set(cfg.basic_auth_users) == {USER, "other"}
    assert HASH not in repr(cfg)
    assert HASH not in str(cfg.describe())
    ctx = server_ssl_context(cfg)
    assert ctx is not None
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert check_basic_auth(cfg, basic("other", PASSWORD))  # a $2y$ hash (htpasswd) works


def test_an_empty_file_turns_nothing_on(tmp_path: Path) -> None:
    cfg = load_web_config(write_config(tmp_path, "# nothing\n"))
    assert cfg.tls is None
    assert server_ssl_context(cfg) is None
    assert authorize(cfg, {}) == (True, {})
    assert check_basic_auth(cfg, None)


def test_basic_auth_without_tls_is_allowed(tmp_path: Path) -> None:
    cfg = load_web_config(write_config(tmp_path, f"basic_auth_users:\n  {USER}: {HASH}\n"))
    assert cfg.tls is None
    with serve(cfg) as port:
        assert get(f"http://127.0.0.1:{port}/metrics", auth=basic(USER, PASSWORD)).status == 200
        assert get(f"http://127.0.0.1:{port}/metrics").status == 401


# ---------------------------------------------------------------------------------------------
# Bad files: one ConfigError naming the file and the key, no traceback, no secret


BAD_CONFIGS = [
    ("unknown top-level key", "basic_auth_user:\n  prom: {hash}\n", "basic_auth_user",
     "did you mean 'basic_auth_users'"),
    ("unknown TLS key", "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  certfile: x\n",
     "tls_server_config.certfile", "unknown key"),
    ("missing cert file", "tls_server_config:\n  cert_file: nope.crt\n  key_file: {key}\n",
     "tls_server_config.cert_file", "does not exist"),
    ("missing key_file", "tls_server_config:\n  cert_file: {crt}\n", "tls_server_config.key_file", "missing"),
    ("plaintext password instead of a hash", "basic_auth_users:\n  prom: {password}\n",
     "basic_auth_users.prom", "not a bcrypt hash"),
    ("truncated hash", "basic_auth_users:\n  prom: '{short_hash}'\n", "basic_auth_users.prom", "not a bcrypt hash"),
    ("numeric hash", "basic_auth_users:\n  prom: 12345\n", "basic_auth_users.prom", "not a bcrypt hash"),
    ("user with a colon", "basic_auth_users:\n  'a:b': {hash}\n", "basic_auth_users.a:b", "cannot contain ':'"),
    ("duplicate user", "basic_auth_users:\n  prom: {hash}\n  prom: {hash}\n", "duplicate key 'prom'", "line 3"),
    ("bad client_auth_type",
     "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: RequireAndVerify\n"
     "  client_ca_file: {ca}\n", "tls_server_config.client_auth_type", "did you mean 'RequireAndVerifyClientCert'"),
    ("RequireAnyClientCert",
     "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: RequireAnyClientCert\n",
     "tls_server_config.client_auth_type", "not supported"),
    ("RequestClientCert",
     "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: RequestClientCert\n",
     "tls_server_config.client_auth_type", "not supported"),
    ("client auth without a CA",
     "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: RequireAndVerifyClientCert\n",
     "tls_server_config.client_ca_file", "needs client_ca_file"),
    ("a CA without client auth", "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_ca_file: {ca}\n",
     "tls_server_config.client_auth_type", "NoClientCert"),
    ("SANs without verification",
     "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: VerifyClientCertIfGiven\n"
     "  client_ca_file: {ca}\n  client_allowed_sans: [x]\n", "tls_server_config.client_allowed_sans",
     "RequireAndVerifyClientCert"),
    ("a CA file that holds no certificate",
     "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: RequireAndVerifyClientCert\n"
     "  client_ca_file: {empty}\n", "tls_server_config.client_ca_file", "CA certificate"),
    ("inline key", "tls_server_config:\n  cert_file: {crt}\n  key: {inline_key}\n", "tls_server_config.key",
     "inline keys are not supported"),
    ("bad min_version", "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  min_version: TLS1.2\n",
     "tls_server_config.min_version", "unknown TLS version"),
    ("min above max",
     "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  min_version: TLS13\n  max_version: TLS12\n",
     "tls_server_config.min_version", "above max_version"),
    ("unknown cipher", "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  cipher_suites: [AES128-SHA]\n",
     "tls_server_config.cipher_suites[0]", "unknown cipher suite"),
    ("insecure cipher",
     "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n",
     "tls_server_config.cipher_suites[0]", "insecure"),
    ("two curves",
     "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  curve_preferences: [X25519, CurveP256]\n",
     "tls_server_config.curve_preferences", "only one curve"),
    ("TLS option without TLS", "tls_server_config:\n  min_version: TLS13\n", "tls_server_config.min_version",
     "TLS is off"),
    ("header not allowed", "http_server_config:\n  headers:\n    X-Powered-By: me\n",
     "http_server_config.headers.X-Powered-By", "unknown key"),
    ("bad X-Frame-Options", "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
     "http_server_config.headers.X-Frame-Options", "deny, sameorigin"),
    ("http2 not a bool", "http_server_config:\n  http2: maybe\n", "http_server_config.http2", "true or false"),
    ("rate_limit", "rate_limit:\n  interval: 1s\n  burst: 5\n", "rate_limit", "not supported"),
    ("key does not match the cert", "tls_server_config:\n  cert_file: {crt}\n  key_file: {client_key}\n",
     "tls_server_config.cert_file", "cannot load"),
    ("encrypted key", "tls_server_config:\n  cert_file: {crt}\n  key_file: {encrypted_key}\n",
     "tls_server_config.key_file", "encrypted"),
    ("YAML syntax error", "basic_auth_users:\n  prom: {hash}\n  other: [{password}\n", "not valid YAML", "line"),
    ("top level not a mapping", "- {password}\n", "expected a mapping", "list"),
]


@pytest.mark.parametrize(("text", "key", "reason"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_is_one_config_error_naming_file_and_key(
        pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, key: str, reason: str) -> None:
    (tmp_path / "empty.pem").write_text("")
    inline_key = pki.server_key.read_text().replace("\n", "\\n")
    body = text.format(hash=HASH, password=PASSWORD, short_hash=HASH[:-5], crt=pki.server_crt, key=pki.server_key,
                       ca=pki.ca, empty=tmp_path / "empty.pem", inline_key=f'"{inline_key}"',
                       client_key=pki.client_key, encrypted_key=pki.encrypted_key)
    path = write_config(tmp_path, body, "my-web.yml")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConfigError) as info:
        load_web_config(path)
    msg = str(info.value)
    assert str(path) in msg
    assert key in msg
    assert reason in msg
    exc = info.value
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__), "a chained traceback"
    for secret in (PASSWORD, HASH, HASH[:-5], *pki.private_keys()):
        assert secret not in msg
        assert secret not in _logged(caplog)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yml.*No such file"):
        load_web_config(tmp_path / "nope.yml")


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every record as the agent would print it, structured fields included."""
    fmt = TextFormatter()
    return "\n".join(fmt.format(r) for r in caplog.records)


# ---------------------------------------------------------------------------------------------
# TLS and basic auth over real connections


def test_https_with_basic_auth(pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    cfg = load_web_config(tls_config(pki, tmp_path, rest="http_server_config:\n  headers:\n"
                                                          "    X-Content-Type-Options: nosniff\n"))
    ctx = client_context(pki)
    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        ok = get(url, ctx, basic(USER, PASSWORD))
        assert (ok.status, ok.body) == (200, METRICS)
        assert ok.headers["X-Content-Type-Options"] == "nosniff"
        assert "WWW-Authenticate" not in ok.headers
        assert get(f"https://localhost:{port}/metrics", ctx, basic(USER, PASSWORD)).status == 200  # DNS SAN

        for auth in (basic(USER, "wrong"), None, basic("nobody", PASSWORD), "Basic !!notbase64!!",
                     "Bearer " + PASSWORD, basic(USER, PASSWORD + "x" * 80),
                     "Basic " + base64.b64encode(PASSWORD.encode()).decode()):
            denied = get(url, ctx, auth)
            assert denied.status == 401, auth
            assert denied.headers["WWW-Authenticate"].startswith('Basic realm="warpwatch"')
            assert denied.headers["X-Content-Type-Options"] == "nosniff"
            assert METRICS not in denied.body
        assert get(f"https://127.0.0.1:{port}/other", ctx).status == 401  # every path is protected

        plain = get(f"http://127.0.0.1:{port}/metrics", auth=basic(USER, PASSWORD))
        assert plain.status == 400
        assert b"Client sent an HTTP request to an HTTPS server" in plain.body

        untrusting = ssl.create_default_context()  # the system CAs do not know the test CA
        err = refused(url, untrusting, basic(USER, PASSWORD))
        assert "CERTIFICATE_VERIFY_FAILED" in str(err)
    logged = _logged(caplog)
    assert "tls_enabled" in logged and str(cfg.path) in logged and "basic_auth_users=1" in logged
    for secret in (PASSWORD, HASH, *pki.private_keys()):
        assert secret not in logged


def test_client_certificate_required(pki: Pki, tmp_path: Path) -> None:
    cfg = load_web_config(tls_config(
        pki, tmp_path, f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"))
    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        assert get(url, client_context(pki, (pki.client_crt, pki.client_key)), basic(USER, PASSWORD)).status == 200
        assert get(url, client_context(pki, (pki.client_crt, pki.client_key)), basic(USER, "no")).status == 401
        refused(url, client_context(pki), basic(USER, PASSWORD))
        refused(url, client_context(pki, (pki.foreign_crt, pki.foreign_key)), basic(USER, PASSWORD))
        # TLS 1.2 reports the refusal inside the handshake itself
        err = refused(url, client_context(pki, max_version=ssl.TLSVersion.TLSv1_2), basic(USER, PASSWORD))
        assert "CERTIFICATE" in str(err).upper() or "HANDSHAKE" in str(err).upper()


def test_client_certificate_optional(pki: Pki, tmp_path: Path) -> None:
    cfg = load_web_config(tls_config(
        pki, tmp_path, f"  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {pki.ca}\n"))
    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        assert get(url, client_context(pki), basic(USER, PASSWORD)).status == 200
        assert get(url, client_context(pki, (pki.client_crt, pki.client_key)), basic(USER, PASSWORD)).status == 200
        refused(url, client_context(pki, (pki.foreign_crt, pki.foreign_key)), basic(USER, PASSWORD))


def test_client_allowed_sans(pki: Pki, tmp_path: Path) -> None:
    base = f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"
    client = (pki.client_crt, pki.client_key)
    for sans, accepted in (("[spiffe://test/prometheus]", True), ("[other.test, prometheus.test]", True),
                           ("[grafana.test]", False)):
        cfg = load_web_config(tls_config(pki, tmp_path, base + f"  client_allowed_sans: {sans}\n", users=False))
        with serve(cfg) as port:
            url = f"https://127.0.0.1:{port}/metrics"
            if accepted:
                assert get(url, client_context(pki, client)).status == 200
            else:
                refused(url, client_context(pki, client))


def test_min_version_tls13_refuses_a_tls12_client(pki: Pki, tmp_path: Path) -> None:
    cfg = load_web_config(tls_config(pki, tmp_path, "  min_version: TLS13\n"))
    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        err = refused(url, client_context(pki, max_version=ssl.TLSVersion.TLSv1_2), basic(USER, PASSWORD))
        assert "VERSION" in str(err).upper()
        assert get(url, client_context(pki), basic(USER, PASSWORD)).status == 200


def test_max_version_and_cipher_suites_are_applied(pki: Pki, tmp_path: Path) -> None:
    cfg = load_web_config(tls_config(pki, tmp_path, "  max_version: TLS12\n  cipher_suites:\n"
                                                    "    - TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\n"))
    with serve(cfg) as port, socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            client_context(pki).wrap_socket(raw, server_hostname="localhost") as conn:
        assert conn.version() == "TLSv1.2"
        cipher = conn.cipher()
        assert cipher is not None and cipher[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"


def test_a_silent_client_does_not_block_others_and_times_out(pki: Pki, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="warpwatch.webconfig")
    cfg = load_web_config(tls_config(pki, tmp_path))
    with serve(cfg, handshake_timeout=1.0) as port:
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        half = socket.create_connection(("127.0.0.1", port))
        half.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
        t0 = time.monotonic()
        assert get(f"https://127.0.0.1:{port}/metrics", client_context(pki), basic(USER, PASSWORD)).status == 200
        assert time.monotonic() - t0 < 1.0
        for s in [*silent, half]:
            s.settimeout(5)
            assert s.recv(1) == b"", "the server should close a connection that never finishes its handshake"
            s.close()
    assert "tls_handshake_failed" in _logged(caplog)


def test_a_rotated_certificate_is_picked_up(pki: Pki, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki.server_crt, cert)
    shutil.copy(pki.server_key, key)
    cfg = load_web_config(write_config(tmp_path, "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"))

    def serial(port: int) -> int:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                client_context(pki).wrap_socket(raw, server_hostname="localhost") as conn:
            return int(conn.getpeercert()["serialNumber"], 16)  # type: ignore[index, arg-type]

    with serve(cfg) as port:
        assert serial(port) == 2
        _make_leaf(pki.dir, "rotated", "ca", "serverAuth", "DNS:localhost,IP:127.0.0.1", 9)
        key.write_bytes(b"")  # half-written rotation: the old certificate keeps serving
        assert serial(port) == 2
        shutil.copy(pki.dir / "rotated.key", key)
        shutil.copy(pki.dir / "rotated.crt", cert)
        assert serial(port) == 9


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_curl(pki: Pki, tmp_path: Path) -> None:
    assert CURL is not None
    cfg = load_web_config(tls_config(
        pki, tmp_path, f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"))

    def curl(*args: str) -> tuple[int, str, str]:
        """(curl's exit status, HTTP status code, body or error)."""
        proc = subprocess.run([CURL, "-sS", "--max-time", "10", "--cacert", str(pki.ca), "-o", "-",
                               "-w", "\n%{http_code}", *args], capture_output=True, text=True, check=False)
        body, _, code = proc.stdout.rpartition("\n")
        return proc.returncode, code, body if proc.returncode == 0 else proc.stderr

    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        cert = ("--cert", str(pki.client_crt), "--key", str(pki.client_key))
        assert curl(*cert, "-u", f"{USER}:{PASSWORD}", url) == (0, "200", METRICS.decode())
        assert curl(*cert, "--tls-max", "1.2", "-u", f"{USER}:{PASSWORD}", url) == (0, "200", METRICS.decode())
        assert curl(*cert, "-u", f"{USER}:wrong", url)[:2] == (0, "401")
        assert curl(*cert, url)[:2] == (0, "401")
        rc, _, err = curl("-u", f"{USER}:{PASSWORD}", url)  # no client certificate
        assert rc != 0, err
        rc, code, body = curl(*cert, "-u", f"{USER}:{PASSWORD}", url.replace("https:", "http:"))
        assert (rc, code) == (0, "400") and "Client sent an HTTP request to an HTTPS server" in body


# ---------------------------------------------------------------------------------------------
# Basic auth cache


def test_successful_checks_are_cached_failed_ones_are_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    monkeypatch.setattr(basicauth, "_cache", collections.OrderedDict())
    monkeypatch.setattr(basicauth, "AUTH_CACHE_SIZE", 3)
    users = "".join(f"  u{i}: {HASH}\n" for i in range(5))
    cfg = load_web_config(write_config(tmp_path, f"basic_auth_users:\n{users}"))

    assert check_basic_auth(cfg, basic("u0", PASSWORD))
    assert check_basic_auth(cfg, basic("u0", PASSWORD))
    assert len(calls) == 1, "a successful check is cached"
    assert not check_basic_auth(cfg, basic("u0", "wrong"))
    assert not check_basic_auth(cfg, basic("u0", "wrong"))
    assert len(calls) == 3, "failed checks are not cached"
    assert not check_basic_auth(cfg, basic("ghost", PASSWORD))
    assert len(calls) == 4 and calls[-1] == cfg.dummy_hash, "an unknown user costs a bcrypt too"
    assert calls[-1][:7] == HASH.encode()[:7] == b"$2b$04$", "at the configured cost, not a fixed one"
    for i in range(1, 5):
        assert check_basic_auth(cfg, basic(f"u{i}", PASSWORD))
    assert len(basicauth._cache) == 3, "the cache is bounded"
    n = len(calls)
    assert check_basic_auth(cfg, basic("u0", PASSWORD))
    assert len(calls) == n + 1, "u0 was evicted"
    assert all(PASSWORD.encode() not in k for k in basicauth._cache)


def test_authorize_accepts_the_handlers_header_object(tmp_path: Path) -> None:
    cfg = load_web_config(write_config(tmp_path, f"basic_auth_users:\n  {USER}: {HASH}\n"))
    msg = http.client.HTTPMessage()
    msg["authorization"] = basic(USER, PASSWORD)  # header names are case-insensitive
    assert authorize(cfg, msg) == (True, {})
    allowed, extra = authorize(cfg, {"Authorization": basic(USER, "nope")})
    assert not allowed and extra == {"WWW-Authenticate": 'Basic realm="warpwatch", charset="UTF-8"'}


def test_http2_is_noted_as_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="warpwatch.webconfig")
    load_web_config(write_config(tmp_path, "http_server_config:\n  http2: true\n"))
    assert "web_config_http2_ignored" in _logged(caplog)


# ---------------------------------------------------------------------------------------------
# A real Prometheus scrapes over TLS with basic auth (and client certificates)


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
    mutual_tls = load_web_config(tls_config(
        pki, tmp_path / "b", f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"))
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
            for job, (port, c, pw) in jobs.items())
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" + scrape)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with (tmp_path / "prometheus.log").open("w") as log:
            proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                stdout=log, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + 25
                targets: dict[str, dict[str, Any]] = {}
                while time.monotonic() < deadline:
                    if proc.poll() is not None:
                        break
                    with contextlib.suppress(OSError, ValueError):
                        targets = _targets(url)
                        if len(targets) == len(jobs) and all(t["health"] != "unknown" for t in targets.values()):
                            break
                    time.sleep(0.25)
                assert proc.poll() is None, "prometheus exited:\n" + (tmp_path / "prometheus.log").read_text()[-3000:]
            finally:
                proc.terminate()
                proc.wait(15)
    assert set(targets) == set(jobs), targets
    assert targets["tls_good"]["health"] == "up", targets["tls_good"]["lastError"]
    assert targets["mtls_good"]["health"] == "up", targets["mtls_good"]["lastError"]
    assert targets["tls_wrong_password"]["health"] == "down"
    assert "401" in targets["tls_wrong_password"]["lastError"]
    assert targets["mtls_no_client_cert"]["health"] == "down"
    assert "certificate required" in targets["mtls_no_client_cert"]["lastError"]


def test_curve_preferences_restrict_the_key_exchange(pki: Pki, tmp_path: Path) -> None:
    cfg = load_web_config(tls_config(pki, tmp_path, "  curve_preferences: [CurveP384]\n", users=False))
    with serve(cfg) as port:
        url = f"https://127.0.0.1:{port}/metrics"
        assert get(url, client_context(pki)).status == 200
        x25519_only = client_context(pki)
        x25519_only.set_ecdh_curve("X25519")
        refused(url, x25519_only)
