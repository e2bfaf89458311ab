"""The exporter-toolkit web config: TLS and basic auth, checked with real servers and real clients.

Certificates are made by the `openssl` command line tool for each test session (a CA, a server
certificate for localhost/127.0.0.1, client certificates from that CA and from a foreign one).
A minimal ThreadingHTTPServer, secured by `secure_server` and guarded by `authorize`, is hit by
urllib, curl (when installed) and a real Prometheus (Debian package `prometheus`).
"""

from __future__ import annotations

import logging
import shutil
import ssl
from pathlib import Path

import pytest

from support.pki import HASH, PASSWORD, USER, Pki, basic, get
from support.webconfigkit import _logged, serve, write_config
from warpwatch.errors import ConfigError
from warpwatch.serving.basicauth import BasicAuth
from warpwatch.serving.tls import server_ssl_context
from warpwatch.serving.webfile import load_web_config

# ---------------------------------------------------------------------------------------------
# Certificates


# ---------------------------------------------------------------------------------------------
# A minimal server and clients


# ---------------------------------------------------------------------------------------------
# Loading


def test_full_config_loads_with_relative_paths_resolved_against_the_file(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    for p in (pki.server_crt, pki.server_key, pki.ca):
        shutil.copy(p, conf_dir / p.name)
    path = write_config(
        conf_dir,
        f"""
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
""",
    )
    monkeypatch.chdir(tmp_path)  # relative to the file, not to the working directory
    cfg = load_web_config(Path("etc") / "web-config.yml")
    assert cfg.path == path
    assert cfg.tls is not None
    assert cfg.tls.cert_file == conf_dir / "server.crt"
    assert cfg.tls.key_file == conf_dir / "server.key"
    assert cfg.tls.client_ca_file == conf_dir / "ca.crt"
    assert cfg.tls.client_auth_type == "RequireAndVerifyClientCert"
    assert cfg.tls.client_allowed_sans == ("prometheus.test",)
    assert cfg.headers == (
        ("X-Frame-Options", "deny"),
        ("X-Content-Type-Options", "nosniff"),
        ("Strict-Transport-Security", "max-age=31536000"),
    )
    assert cfg.http2 is False
    assert set(cfg.basic_auth_users) == {USER, "other"}
    assert HASH not in repr(cfg)
    assert HASH not in str(cfg.describe())
    ctx = server_ssl_context(cfg)
    assert ctx is not None
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert BasicAuth(cfg).check(basic("other", PASSWORD))  # a $2y$ hash (htpasswd) works


def test_an_empty_file_turns_nothing_on(tmp_path: Path) -> None:
    cfg = load_web_config(write_config(tmp_path, "# nothing\n"))
    assert cfg.tls is None
    assert server_ssl_context(cfg) is None
    assert BasicAuth(cfg).authorize({}) == (True, {})
    assert BasicAuth(cfg).check(None)


@pytest.mark.slow
def test_basic_auth_without_tls_is_allowed(tmp_path: Path) -> None:
    cfg = load_web_config(write_config(tmp_path, f"basic_auth_users:\n  {USER}: {HASH}\n"))
    assert cfg.tls is None
    with serve(cfg) as port:
        assert get(f"http://127.0.0.1:{port}/metrics", auth=basic(USER, PASSWORD)).status == 200
        assert get(f"http://127.0.0.1:{port}/metrics").status == 401


# ---------------------------------------------------------------------------------------------
# Bad files: one ConfigError naming the file and the key, no traceback, no secret


BAD_CONFIGS = [
    (
        "unknown top-level key",
        "basic_auth_user:\n  prom: {hash}\n",
        "basic_auth_user",
        "did you mean 'basic_auth_users'",
    ),
    (
        "unknown TLS key",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  certfile: x\n",
        "tls_server_config.certfile",
        "unknown key",
    ),
    (
        "missing cert file",
        "tls_server_config:\n  cert_file: nope.crt\n  key_file: {key}\n",
        "tls_server_config.cert_file",
        "does not exist",
    ),
    ("missing key_file", "tls_server_config:\n  cert_file: {crt}\n", "tls_server_config.key_file", "missing"),
    (
        "plaintext password instead of a hash",
        "basic_auth_users:\n  prom: {password}\n",
        "basic_auth_users.prom",
        "not a bcrypt hash",
    ),
    ("truncated hash", "basic_auth_users:\n  prom: '{short_hash}'\n", "basic_auth_users.prom", "not a bcrypt hash"),
    ("numeric hash", "basic_auth_users:\n  prom: 12345\n", "basic_auth_users.prom", "not a bcrypt hash"),
    ("user with a colon", "basic_auth_users:\n  'a:b': {hash}\n", "basic_auth_users.a:b", "cannot contain ':'"),
    ("duplicate user", "basic_auth_users:\n  prom: {hash}\n  prom: {hash}\n", "duplicate key 'prom'", "line 3"),
    (
        "bad client_auth_type",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: RequireAndVerify\n"
        "  client_ca_file: {ca}\n",
        "tls_server_config.client_auth_type",
        "did you mean 'RequireAndVerifyClientCert'",
    ),
    (
        "RequireAnyClientCert",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: RequireAnyClientCert\n",
        "tls_server_config.client_auth_type",
        "not supported",
    ),
    (
        "RequestClientCert",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: RequestClientCert\n",
        "tls_server_config.client_auth_type",
        "not supported",
    ),
    (
        "client auth without a CA",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: RequireAndVerifyClientCert\n",
        "tls_server_config.client_ca_file",
        "needs client_ca_file",
    ),
    (
        "a CA without client auth",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_ca_file: {ca}\n",
        "tls_server_config.client_auth_type",
        "NoClientCert",
    ),
    (
        "SANs without verification",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: VerifyClientCertIfGiven\n"
        "  client_ca_file: {ca}\n  client_allowed_sans: [x]\n",
        "tls_server_config.client_allowed_sans",
        "RequireAndVerifyClientCert",
    ),
    (
        "a CA file that holds no certificate",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  client_auth_type: RequireAndVerifyClientCert\n"
        "  client_ca_file: {empty}\n",
        "tls_server_config.client_ca_file",
        "CA certificate",
    ),
    (
        "inline key",
        "tls_server_config:\n  cert_file: {crt}\n  key: {inline_key}\n",
        "tls_server_config.key",
        "inline keys are not supported",
    ),
    (
        "bad min_version",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  min_version: TLS1.2\n",
        "tls_server_config.min_version",
        "unknown TLS version",
    ),
    (
        "min above max",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  min_version: TLS13\n  max_version: TLS12\n",
        "tls_server_config.min_version",
        "above max_version",
    ),
    (
        "unknown cipher",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  cipher_suites: [AES128-SHA]\n",
        "tls_server_config.cipher_suites[0]",
        "unknown cipher suite",
    ),
    (
        "insecure cipher",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n",
        "tls_server_config.cipher_suites[0]",
        "insecure",
    ),
    (
        "two curves",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n  curve_preferences: [X25519, CurveP256]\n",
        "tls_server_config.curve_preferences",
        "only one curve",
    ),
    (
        "TLS option without TLS",
        "tls_server_config:\n  min_version: TLS13\n",
        "tls_server_config.min_version",
        "TLS is off",
    ),
    (
        "header not allowed",
        "http_server_config:\n  headers:\n    X-Powered-By: me\n",
        "http_server_config.headers.X-Powered-By",
        "unknown key",
    ),
    (
        "bad X-Frame-Options",
        "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
        "http_server_config.headers.X-Frame-Options",
        "deny, sameorigin",
    ),
    ("http2 not a bool", "http_server_config:\n  http2: maybe\n", "http_server_config.http2", "true or false"),
    ("rate_limit", "rate_limit:\n  interval: 1s\n  burst: 5\n", "rate_limit", "not supported"),
    (
        "key does not match the cert",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {client_key}\n",
        "tls_server_config.cert_file",
        "cannot load",
    ),
    (
        "encrypted key",
        "tls_server_config:\n  cert_file: {crt}\n  key_file: {encrypted_key}\n",
        "tls_server_config.key_file",
        "encrypted",
    ),
    ("YAML syntax error", "basic_auth_users:\n  prom: {hash}\n  other: [{password}\n", "not valid YAML", "line"),
    ("top level not a mapping", "- {password}\n", "expected a mapping", "list"),
]


@pytest.mark.parametrize(("text", "key", "reason"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_is_one_config_error_naming_file_and_key(
    pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, key: str, reason: str
) -> None:
    (tmp_path / "empty.pem").write_text("")
    inline_key = pki.server_key.read_text().replace("\n", "\\n")
    body = text.format(
        hash=HASH,
        password=PASSWORD,
        short_hash=HASH[:-5],
        crt=pki.server_crt,
        key=pki.server_key,
        ca=pki.ca,
        empty=tmp_path / "empty.pem",
        inline_key=f'"{inline_key}"',
        client_key=pki.client_key,
        encrypted_key=pki.encrypted_key,
    )
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


# ---------------------------------------------------------------------------------------------
