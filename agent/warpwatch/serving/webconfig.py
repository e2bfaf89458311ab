"""TLS and basic auth for the HTTP server, from a Prometheus exporter-toolkit web-config file.

The file (`--web-config`, `WARPWATCH_WEB_CONFIG`, YAML key `web_config`) has the format that
node_exporter and the other exporters built on prometheus/exporter-toolkit read
(`docs/web-configuration.md` there), so one file and one Prometheus scrape config serve them all::

    tls_server_config:
      cert_file: server.crt          # relative paths resolve against this file's folder
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional; default NoClientCert
      client_ca_file: ca.crt
      min_version: TLS12             # TLS10 | TLS11 | TLS12 (default) | TLS13
    http_server_config:
      headers:
        Strict-Transport-Security: max-age=31536000
    basic_auth_users:
      prometheus: $2b$10$...         # bcrypt hash, e.g. from `htpasswd -nBC 10 "" | tr -d ':\\n'`

What is supported, and what is not (rejected with a `ConfigError` naming the file and the key,
never silently ignored):

- `tls_server_config`: `cert_file`, `key_file`, `client_ca_file`, `client_ca` (inline PEM),
  `client_auth_type` NoClientCert | VerifyClientCertIfGiven | RequireAndVerifyClientCert,
  `min_version`/`max_version` TLS10..TLS13, `cipher_suites` (the Go names that
  `crypto/tls.CipherSuites()` lists, as exporter-toolkit accepts; they restrict TLS 1.2 and
  below: TLS 1.3 suites are not configurable, in Go as in OpenSSL), `prefer_server_cipher_suites`,
  `curve_preferences` with exactly one curve (Python's `ssl` sets one ECDH group), and
  `client_allowed_sans` (with RequireAndVerifyClientCert). Not supported: RequestClientCert and
  RequireAnyClientCert/RequireClientCert (Python's `ssl` cannot accept a client certificate
  without verifying it), inline `cert`/`key` (Python's `ssl` loads a certificate and its key
  only from files: put them in files, e.g. a mounted Secret), several curves.
  Certificate, key and CA files are re-read when they change on disk (checked on each new
  connection), so a rotated certificate (cert-manager) is picked up without a restart.
- `http_server_config.headers`: the five headers exporter-toolkit allows (Content-Security-Policy,
  X-Frame-Options deny|sameorigin, X-Content-Type-Options nosniff, X-XSS-Protection,
  Strict-Transport-Security), sent on every response; an empty value leaves the header unset.
  `http2` is accepted and ignored (the server speaks HTTP/1.1; ALPN offers only `http/1.1`).
- `basic_auth_users`: user -> bcrypt hash ($2a$, $2b$, $2y$). Successful checks are cached (bcrypt
  is slow by design; exporter-toolkit caches too), keyed by a keyed hash of (user, stored hash,
  password), at most `AUTH_CACHE_SIZE` entries; failed ones are not cached, so guessing costs a
  bcrypt each. An unknown user costs a bcrypt at the configured cost too (no user enumeration by
  timing, `dummy_hash`). The agent's HTTP server runs the checks in a small pool with a bounded,
  per-client fair queue (`serving.auth`): a flood of bad passwords gets 429, and cached
  credentials skip the queue.
- `rate_limit`: not supported (rejected).

Everything else in the file, or a misspelt key, is an error. The user list and headers are read
once at start: change them by restarting.

How the service uses it (this is the whole wiring)::

    web = load_web_config(config.web_config) if config.web_config else None   # at start-up
    server = ThreadingHTTPServer((address, port), handler)
    if web is not None:
        secure_server(server, web)        # before serve_forever(); no-op when the file has no TLS

    # in the BaseHTTPRequestHandler, first thing in do_GET (so for every path):
    allowed, extra = authorize(web, self.headers) if web is not None else (True, {})
    if not allowed:
        -> 401 with the headers in `extra` (they include WWW-Authenticate), body "unauthorized"
    -> otherwise serve the path, adding `extra` (the configured headers) to the response

Every path is protected, `/healthz` and `/readyz` included, as exporter-toolkit does. So in
Kubernetes, with TLS only, the probes need `scheme: HTTPS` (the kubelet does not verify the
certificate); with basic auth they need an `Authorization` header in `httpHeaders` (the
credential then sits in the pod spec) or `tcpSocket` probes instead; with client certificates
required, only `tcpSocket` probes work (the kubelet has no client certificate). An unauthorized
request is answered 401, and never logged with its credentials.

The TLS handshake runs in the connection's own thread (ThreadingHTTPServer), with a timeout
(`HANDSHAKE_TIMEOUT`), so a slow or silent client never blocks the accept loop. A plain-HTTP
request to the TLS port gets "400 Client sent an HTTP request to an HTTPS server.", as Go's
servers answer. Failed handshakes are logged at debug level, with the client address and reason.

Secrets (passwords, hashes, private keys) never appear in errors or logs: a bad hash is reported
by user name only, a YAML syntax error by line and column only (no excerpt of the file).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import difflib
import hashlib
import hmac
import ipaddress
import logging
import os
import re
import socket
import socketserver
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import bcrypt
import yaml

from ..errors import ConfigError
from ..logs import event

log = logging.getLogger("warpwatch.webconfig")

HANDSHAKE_TIMEOUT = 10.0
"""Seconds a new connection may take to finish its TLS handshake."""
AUTH_CACHE_SIZE = 100
"""Successful basic-auth checks remembered (exporter-toolkit keeps 100 too)."""
REALM = "warpwatch"

CLIENT_AUTH_TYPES = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
_UNSUPPORTED_CLIENT_AUTH = {
    "RequestClientCert": "requests a client certificate without verifying it",
    "RequireAnyClientCert": "requires a client certificate without verifying it",
    "RequireClientCert": "requires a client certificate without verifying it",
}
TLS_VERSIONS: Mapping[str, ssl.TLSVersion] = MappingProxyType({
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
})
CIPHER_SUITES: Mapping[str, str | None] = MappingProxyType({
    # Go's crypto/tls.CipherSuites() names -> OpenSSL names (None: TLS 1.3, not configurable).
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
})
_INSECURE_CIPHER_SUITES = frozenset({
    "TLS_RSA_WITH_RC4_128_SHA", "TLS_RSA_WITH_3DES_EDE_CBC_SHA", "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
})
CURVES: Mapping[str, str] = MappingProxyType({
    "CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519",
})
EXTRA_HEADERS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    # header -> accepted values (empty: any), exactly exporter-toolkit's list.
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
})

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
_TLS_KEYS = ("cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
             "client_allowed_sans", "min_version", "max_version", "cipher_suites",
             "prefer_server_cipher_suites", "curve_preferences")
_HTTP_KEYS = ("http2", "headers")
_BCRYPT_RE = re.compile(rb"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
_DUMMY_HASH = b"$2b$10$g2JGekG2lg0pVluOIUPhjeTfmSRprJjdGU52ARIKUKeCey68A4/sK"
"""A bcrypt hash of a throw-away password; unknown users are checked against it with its cost
replaced by the configured one (`WebConfig.dummy_hash`), so they cost the same time."""


def dummy_hash(costs: list[int]) -> bytes:
    """`_DUMMY_HASH` at the most common of the configured bcrypt `costs` (the highest on a tie):
    an unknown user then takes as long as the users whose hash has that cost. (A fixed cost would
    tell unknown users from known ones by timing whenever the real hashes have another cost, e.g.
    `htpasswd -B`'s 5.)"""
    if not costs:
        return _DUMMY_HASH
    cost = max(set(costs), key=lambda c: (costs.count(c), c))
    return _DUMMY_HASH[:4] + b"%02d" % cost + _DUMMY_HASH[6:]


@dataclass(frozen=True)
class TLSServerConfig:
    """`tls_server_config`, validated; paths are absolute."""

    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    client_ca: str | None = None
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()


@dataclass(frozen=True)
class WebConfig:
    """A loaded web-config file. `tls` None: plain HTTP; `basic_auth_users` empty: no auth."""

    path: Path
    tls: TLSServerConfig | None = None
    headers: tuple[tuple[str, str], ...] = ()
    """Response headers from `http_server_config.headers`, sent on every response."""
    http2: bool = True
    """Read and ignored: the server speaks HTTP/1.1 only."""
    basic_auth_users: Mapping[str, bytes] = field(
        default_factory=lambda: MappingProxyType({}), repr=False, hash=False, compare=False)
    """user -> bcrypt hash. Kept out of repr() so that the hashes never reach a log."""

    @property
    def auth_required(self) -> bool:
        return bool(self.basic_auth_users)

    @property
    def dummy_hash(self) -> bytes:
        """The hash an unknown user's password is checked against (`dummy_hash`)."""
        return dummy_hash([int(h[4:6]) for h in self.basic_auth_users.values()])

    def describe(self) -> dict[str, Any]:
        """What is on, for the start-up log line: no secret in it."""
        tls = self.tls
        return {
            "web_config": os.fspath(self.path),
            "tls": tls is not None,
            "client_auth": tls.client_auth_type if tls else None,
            "min_version": tls.min_version if tls else None,
            "max_version": tls.max_version if tls else None,
            "cipher_suites": ",".join(tls.cipher_suites) if tls and tls.cipher_suites else None,
            "client_allowed_sans": ",".join(tls.client_allowed_sans) if tls and tls.client_allowed_sans else None,
            "basic_auth": self.auth_required,
            "basic_auth_users": len(self.basic_auth_users),
            "headers": ",".join(k for k, _ in self.headers) or None,
        }


# ---------------------------------------------------------------------------------------------
# Loading


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (Go's strict YAML decoding does too)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


class _Reader:
    """Error helper: every message names the file and the key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, reason: str) -> ConfigError:
        where = f"{key}: " if key else ""
        return ConfigError(f"web config {os.fspath(self.path)!r}: {where}{reason}")

    def mapping(self, value: Any, key: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {type(value).__name__}")
        for k in value:
            if not isinstance(k, str) or k not in allowed:
                hint = difflib.get_close_matches(str(k), allowed, n=1)
                suggestion = f"; did you mean {hint[0]!r}?" if hint else f"; expected one of {', '.join(allowed)}"
                raise self.fail(f"{key}.{k}" if key else str(k), f"unknown key{suggestion}")
        return value

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, got {type(value).__name__}")
        return value

    def strings(self, value: Any, key: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.fail(key, f"expected a list of strings, got {type(value).__name__}")
        return tuple(self.string(v, f"{key}[{i}]") for i, v in enumerate(value))

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {type(value).__name__}")
        return value

    def file(self, value: Any, key: str) -> Path:
        text = self.string(value, key)
        path = Path(text)
        if not path.is_absolute():
            path = self.path.parent / path
        if not path.is_file():
            raise self.fail(key, f"file {os.fspath(path)!r} does not exist or is not a file")
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            raise self.fail(key, f"cannot read {os.fspath(path)!r}: {exc.strerror or exc}") from None
        return path


def load_web_config(path: Path) -> WebConfig:
    """Read and validate a web-config file; build its TLS context once to check the files.

    Raises `ConfigError` naming the file and the key (never quoting a secret)."""
    path = Path(path).absolute()
    r = _Reader(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise r.fail("", f"cannot read: {reason}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise r.fail("", f"not valid YAML: {_yaml_problem(exc)}") from None
    top = r.mapping(data, "", _TOP_KEYS)

    if top.get("rate_limit") is not None:
        raise r.fail("rate_limit", "not supported by warpwatch; remove it (rate-limit in a proxy if needed)")
    tls = _read_tls(r, top.get("tls_server_config"))
    http = r.mapping(top.get("http_server_config"), "http_server_config", _HTTP_KEYS)
    http2 = r.boolean(http["http2"], "http_server_config.http2") if "http2" in http else True
    headers = _read_headers(r, http.get("headers"))
    users = _read_users(r, top.get("basic_auth_users"))

    cfg = WebConfig(path=path, tls=tls, headers=headers, http2=http2,
                    basic_auth_users=MappingProxyType(users))
    if tls is not None:
        _build_context(cfg, tls)  # fail now, not at the first connection
    event(log, "web_config_loaded", **cfg.describe())
    if "http2" in http and http2:
        event(log, "web_config_http2_ignored", web_config=os.fspath(path),
              reason="warpwatch serves HTTP/1.1 only; http_server_config.http2 has no effect")
    return cfg


def _yaml_problem(exc: Exception) -> str:
    """Where and what, without the excerpt of the file that PyYAML quotes (it may hold a secret)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    if mark is None:
        return str(problem)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"


def _read_tls(r: _Reader, raw: Any) -> TLSServerConfig | None:
    k = "tls_server_config"
    t = r.mapping(raw, k, _TLS_KEYS)
    if not any(t.get(name) not in (None, "") for name in
               ("cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file", "client_auth_type")):
        # exporter-toolkit: no certificate, key, CA nor client auth set -> plain HTTP.
        for name in t:
            if t[name] not in (None, "", []):
                raise r.fail(f"{k}.{name}", "set, but TLS is off: cert_file and key_file are missing")
        return None
    if t.get("cert"):
        raise r.fail(f"{k}.cert", "inline certificates are not supported (Python's ssl loads them from files); "
                                  "put it in a file and set cert_file")
    if t.get("key"):
        raise r.fail(f"{k}.key", "inline keys are not supported (Python's ssl loads them from files); "
                                 "put the key in a file and set key_file")
    if not t.get("cert_file"):
        raise r.fail(f"{k}.cert_file", "missing (TLS needs cert_file and key_file)")
    if not t.get("key_file"):
        raise r.fail(f"{k}.key_file", "missing (TLS needs cert_file and key_file)")
    cert_file = r.file(t["cert_file"], f"{k}.cert_file")
    key_file = r.file(t["key_file"], f"{k}.key_file")

    auth = r.string(t.get("client_auth_type") or "NoClientCert", f"{k}.client_auth_type")
    if auth in _UNSUPPORTED_CLIENT_AUTH:
        raise r.fail(f"{k}.client_auth_type",
                     f"{auth!r} is not supported: it {_UNSUPPORTED_CLIENT_AUTH[auth]}, which Python's ssl "
                     "cannot do; use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with client_ca_file")
    if auth not in CLIENT_AUTH_TYPES:
        hint = difflib.get_close_matches(auth, CLIENT_AUTH_TYPES, n=1)
        raise r.fail(f"{k}.client_auth_type", f"unknown value {auth!r}; expected one of "
                     f"{', '.join(CLIENT_AUTH_TYPES)}" + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    ca_file = r.file(t["client_ca_file"], f"{k}.client_ca_file") if t.get("client_ca_file") else None
    ca_text = r.string(t["client_ca"], f"{k}.client_ca") if t.get("client_ca") else None
    if ca_file is not None and ca_text is not None:
        raise r.fail(f"{k}.client_ca", "set both client_ca and client_ca_file; keep one")
    if auth == "NoClientCert" and (ca_file or ca_text):
        raise r.fail(f"{k}.client_auth_type", "client CAs are configured but client_auth_type is NoClientCert; "
                                              "set RequireAndVerifyClientCert")
    if auth != "NoClientCert" and not (ca_file or ca_text):
        raise r.fail(f"{k}.client_ca_file", f"client_auth_type {auth} needs client_ca_file (the CA that "
                                            "signs the client certificates)")
    sans = r.strings(t.get("client_allowed_sans"), f"{k}.client_allowed_sans")
    if sans and auth != "RequireAndVerifyClientCert":
        raise r.fail(f"{k}.client_allowed_sans", "needs client_auth_type RequireAndVerifyClientCert")

    versions = {}
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        v = r.string(t.get(name) or default, f"{k}.{name}")
        if v not in TLS_VERSIONS:
            raise r.fail(f"{k}.{name}", f"unknown TLS version {v!r}; expected one of {', '.join(TLS_VERSIONS)}")
        versions[name] = v
    if TLS_VERSIONS[versions["min_version"]] > TLS_VERSIONS[versions["max_version"]]:
        raise r.fail(f"{k}.min_version", f"{versions['min_version']} is above max_version {versions['max_version']}")

    suites = r.strings(t.get("cipher_suites"), f"{k}.cipher_suites")
    for i, s in enumerate(suites):
        if s in _INSECURE_CIPHER_SUITES:
            raise r.fail(f"{k}.cipher_suites[{i}]", f"{s} is insecure; exporter-toolkit does not accept it either")
        if s not in CIPHER_SUITES:
            hint = difflib.get_close_matches(s, CIPHER_SUITES, n=1)
            raise r.fail(f"{k}.cipher_suites[{i}]", f"unknown cipher suite {s!r}"
                         + (f"; did you mean {hint[0]!r}?" if hint else "; use Go's crypto/tls names"))
    prefer = (r.boolean(t["prefer_server_cipher_suites"], f"{k}.prefer_server_cipher_suites")
              if t.get("prefer_server_cipher_suites") is not None else True)
    curves = r.strings(t.get("curve_preferences"), f"{k}.curve_preferences")
    for i, c in enumerate(curves):
        if c not in CURVES:
            raise r.fail(f"{k}.curve_preferences[{i}]", f"unknown curve {c!r}; expected one of {', '.join(CURVES)}")
    if len(curves) > 1:
        raise r.fail(f"{k}.curve_preferences", "Python's ssl can set only one curve; list exactly one")
    return TLSServerConfig(
        cert_file=cert_file, key_file=key_file, client_auth_type=auth, client_ca_file=ca_file, client_ca=ca_text,
        client_allowed_sans=sans, min_version=versions["min_version"], max_version=versions["max_version"],
        cipher_suites=suites, prefer_server_cipher_suites=prefer, curve_preferences=curves,
    )


def _read_headers(r: _Reader, raw: Any) -> tuple[tuple[str, str], ...]:
    k = "http_server_config.headers"
    if raw is None:
        return ()
    h = r.mapping(raw, k, tuple(EXTRA_HEADERS))
    out = []
    for name, value in h.items():
        if value is None or value == "":
            continue  # "Unset if blank."
        text = r.string(value, f"{k}.{name}")
        if "\r" in text or "\n" in text:
            raise r.fail(f"{k}.{name}", "a header value must be one line")
        allowed = EXTRA_HEADERS[name]
        if allowed and text not in allowed:
            raise r.fail(f"{k}.{name}", f"invalid value {text!r}; expected one of {', '.join(allowed)}")
        out.append((name, text))
    return tuple(out)


def _read_users(r: _Reader, raw: Any) -> dict[str, bytes]:
    k = "basic_auth_users"
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise r.fail(k, f"expected a mapping of user: bcrypt hash, got {type(raw).__name__}")
    users: dict[str, bytes] = {}
    for user, hashed in raw.items():
        if not isinstance(user, str) or not user:
            raise r.fail(k, f"user names must be non-empty strings (got {type(user).__name__})")
        if ":" in user:
            raise r.fail(f"{k}.{user}", "a user name cannot contain ':' (basic auth splits on it)")
        # Never quote the value: it may be a plaintext password put there by mistake.
        if not isinstance(hashed, str):
            raise r.fail(f"{k}.{user}", "not a bcrypt hash (expected a string like $2b$10$...)")
        m = _BCRYPT_RE.fullmatch(hashed.encode("utf-8", "replace"))
        if m is None or not 4 <= int(m.group(1)) <= 31:
            raise r.fail(f"{k}.{user}", "not a bcrypt hash (expected $2a$, $2b$ or $2y$, a cost 04-31 and 53 "
                                        "characters of salt and hash, e.g. from htpasswd -nBC 10 \"\" | tr -d ':\\n')")
        users[user] = hashed.encode()
    return users


# ---------------------------------------------------------------------------------------------
# TLS


def server_ssl_context(cfg: WebConfig) -> ssl.SSLContext | None:
    """The server-side SSL context for `cfg`, or None when the file turns TLS off."""
    return None if cfg.tls is None else _build_context(cfg, cfg.tls)


class _KeyIsEncrypted(Exception):
    pass


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    raise _KeyIsEncrypted


def _build_context(cfg: WebConfig, tls: TLSServerConfig) -> ssl.SSLContext:
    r = _Reader(cfg.path)
    k = "tls_server_config"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.minimum_version = TLS_VERSIONS[tls.min_version]
        ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    except (ValueError, ssl.SSLError) as exc:
        raise r.fail(f"{k}.min_version", f"not supported by this OpenSSL: {exc}") from None
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file, password=_no_password)
    except _KeyIsEncrypted:
        raise r.fail(f"{k}.key_file", f"{os.fspath(tls.key_file)!r} is encrypted; "
                                      "give an unencrypted key (protect it with file permissions)") from None
    except ssl.SSLError as exc:
        raise r.fail(f"{k}.cert_file", f"cannot load the certificate {os.fspath(tls.cert_file)!r} with the key "
                                       f"{os.fspath(tls.key_file)!r}: {_ssl_reason(exc)}") from None
    except OSError as exc:
        raise r.fail(f"{k}.cert_file", f"cannot read: {exc.strerror or exc}") from None
    if tls.client_auth_type != "NoClientCert":
        ca_key = f"{k}.client_ca_file" if tls.client_ca_file else f"{k}.client_ca"
        try:
            if tls.client_ca_file is not None:
                ctx.load_verify_locations(cafile=tls.client_ca_file)
            else:
                ctx.load_verify_locations(cadata=tls.client_ca)
        except (ssl.SSLError, ValueError) as exc:
            raise r.fail(ca_key, f"no usable CA certificate: {_ssl_reason(exc)}") from None
        except OSError as exc:
            raise r.fail(ca_key, f"cannot read: {exc.strerror or exc}") from None
        if not ctx.get_ca_certs():
            raise r.fail(ca_key, "no CA certificate found in it")
        ctx.verify_mode = ssl.CERT_REQUIRED if tls.client_auth_type == "RequireAndVerifyClientCert" \
            else ssl.CERT_OPTIONAL
    if tls.cipher_suites:
        names = [n for n in (CIPHER_SUITES[s] for s in tls.cipher_suites) if n is not None]
        if names:
            try:
                ctx.set_ciphers(":".join(names))
            except ssl.SSLError:
                raise r.fail(f"{k}.cipher_suites", "none of these cipher suites is available in this "
                                                   f"OpenSSL ({ssl.OPENSSL_VERSION})") from None
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    for curve in tls.curve_preferences:
        try:
            ctx.set_ecdh_curve(CURVES[curve])
        except (ValueError, ssl.SSLError) as exc:
            raise r.fail(f"{k}.curve_preferences", f"{curve} is not available: {exc}") from None
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _ssl_reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason) if reason else str(exc)


class _ContextHolder:
    """The current SSL context, rebuilt when the certificate, key or CA files change on disk."""

    def __init__(self, cfg: WebConfig, tls: TLSServerConfig) -> None:
        self.cfg = cfg
        self.tls = tls
        self.lock = threading.Lock()
        self.stamp = self._stamp()
        self.context = _build_context(cfg, tls)
        self.failed_stamp: tuple[Any, ...] | None = None

    def _stamp(self) -> tuple[Any, ...]:
        out: list[Any] = []
        for p in (self.tls.cert_file, self.tls.key_file, self.tls.client_ca_file):
            if p is None:
                continue
            try:
                st = os.stat(p)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def get(self) -> ssl.SSLContext:
        stamp = self._stamp()
        if stamp == self.stamp or stamp == self.failed_stamp:
            return self.context
        with self.lock:
            if stamp != self.stamp and stamp != self.failed_stamp:
                try:
                    self.context = _build_context(self.cfg, self.tls)
                    self.stamp = stamp
                    self.failed_stamp = None
                    event(log, "tls_reloaded", web_config=os.fspath(self.cfg.path),
                          cert_file=os.fspath(self.tls.cert_file))
                except ConfigError as exc:  # e.g. a half-written rotation: keep serving the old one
                    self.failed_stamp = stamp
                    event(log, "tls_reload_failed", logging.WARNING, error=str(exc),
                          action="kept the previous certificate")
            return self.context


_PLAIN_HTTP_ANSWER = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                      b"Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")


def secure_server(server: socketserver.BaseServer, cfg: WebConfig, *,
                  handshake_timeout: float = HANDSHAKE_TIMEOUT) -> None:
    """Serve TLS on `server` (a bound, not yet serving TCP server) when `cfg` turns TLS on.

    Each accepted connection is wrapped and handshaken in `finish_request`, which a
    ThreadingMixIn server runs in the connection's own thread: a slow client cannot stall the
    accept loop. Handshakes that fail or take longer than `handshake_timeout` close the connection
    (logged at debug level). Call before `serve_forever()`. No-op when `cfg.tls` is None."""
    tls = cfg.tls
    if tls is None:
        event(log, "tls_disabled", web_config=os.fspath(cfg.path))
        return
    if not isinstance(server, socketserver.ThreadingMixIn):
        event(log, "tls_handshake_in_accept_loop", logging.WARNING,
              reason=f"{type(server).__name__} is not threaded: a slow TLS client delays the others")
    holder = _ContextHolder(cfg, tls)
    finish_request = server.finish_request

    def tls_finish_request(request: Any, client_address: Any) -> None:
        conn = _handshake(holder, tls, request, client_address, handshake_timeout)
        if conn is None:
            return
        try:
            finish_request(conn, client_address)
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)
            conn.close()

    server.finish_request = tls_finish_request  # type: ignore[method-assign]
    event(log, "tls_enabled", web_config=os.fspath(cfg.path), client_auth=tls.client_auth_type,
          min_version=tls.min_version, max_version=tls.max_version, http2=False)


def _handshake(holder: _ContextHolder, tls: TLSServerConfig, sock: socket.socket, client_address: Any,
               timeout: float) -> ssl.SSLSocket | None:
    client = client_address[0] if isinstance(client_address, tuple) else str(client_address)
    previous = sock.gettimeout()
    sock.settimeout(timeout)
    try:
        first = sock.recv(1, socket.MSG_PEEK)
        if not first:
            return None  # connected and closed (a TCP probe)
        if first != b"\x16":  # not a TLS handshake record: most likely plain HTTP
            event(log, "tls_handshake_failed", logging.DEBUG, client=client, reason="not TLS (plain HTTP?)")
            if first.isalpha():
                sock.sendall(_PLAIN_HTTP_ANSWER)
                _close_gently(sock)
            return None
        conn = holder.get().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
    except OSError as exc:
        event(log, "tls_handshake_failed", logging.DEBUG, client=client, reason=_ssl_reason(exc))
        return None
    try:
        conn.do_handshake()
        if tls.client_allowed_sans and not _san_allowed(conn.getpeercert(), tls.client_allowed_sans):
            event(log, "tls_client_rejected", logging.INFO, client=client,
                  reason="no subject alternative name of the client certificate is in client_allowed_sans")
            _close_gently(conn)
            return None
        conn.settimeout(previous)
        return conn
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError; timeouts too
        event(log, "tls_handshake_failed", logging.DEBUG, client=client, reason=_ssl_reason(exc))
        _close_gently(conn)
        return None


def _close_gently(conn: socket.socket, linger: float = 1.0) -> None:
    """Close after a failed handshake so that the client reads OpenSSL's alert (e.g. "certificate
    required") rather than a reset: send FIN, then drain what the client already sent."""
    try:
        conn.shutdown(socket.SHUT_WR)  # on an SSLSocket this also drops the TLS layer
        deadline = time.monotonic() + linger
        drained = 0
        while drained < 65536:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            conn.settimeout(left)
            chunk = conn.recv(4096)
            if not chunk:
                break
            drained += len(chunk)
    except (OSError, ValueError):
        pass
    finally:
        conn.close()


def _san_allowed(cert: Any, allowed: tuple[str, ...]) -> bool:
    wanted = set(allowed)
    for kind, value in (cert or {}).get("subjectAltName", ()):
        if kind == "IP Address":
            try:
                value = str(ipaddress.ip_address(value.strip()))
            except ValueError:
                continue
        if kind in ("DNS", "IP Address", "email", "URI") and value in wanted:
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Basic auth


class _Headers(Protocol):
    def get(self, name: str, /) -> Any: ...


_cache: OrderedDict[bytes, None] = OrderedDict()
_cache_lock = threading.Lock()
_cache_key = os.urandom(32)


def _cache_id(user: bytes, hashed: bytes, password: bytes) -> bytes:
    msg = b"\0".join((hashlib.sha256(user).digest(), hashlib.sha256(hashed).digest(), password))
    return hmac.new(_cache_key, msg, hashlib.sha256).digest()


def _parse_basic(header: str | None) -> tuple[bytes, bytes] | None:
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    return (user, password) if sep else None


def _credentials(cfg: WebConfig, authorization_header: str | None) -> tuple[bytes, bytes, bytes, bool] | None:
    """(cache key, password, hash to check against, user known) for an `Authorization` header;
    None when it holds no basic credentials at all (refused without a bcrypt)."""
    creds = _parse_basic(authorization_header)
    if creds is None:
        return None
    user_b, password = creds
    try:
        user: str | None = user_b.decode("utf-8")
    except UnicodeDecodeError:
        user = None
    stored = cfg.basic_auth_users.get(user) if user is not None else None
    hashed = stored if stored is not None else cfg.dummy_hash
    return _cache_id(user_b, hashed, password), password, hashed, stored is not None


def cached_basic_auth(cfg: WebConfig, authorization_header: str | None) -> bool:
    """True when these credentials were verified before (the cache): no bcrypt needed.

    The HTTP server answers such requests at once and queues the others for `check_basic_auth`."""
    if not cfg.basic_auth_users:
        return True
    found = _credentials(cfg, authorization_header)
    if found is None or not found[3]:
        return False
    with _cache_lock:
        if found[0] in _cache:
            _cache.move_to_end(found[0])
            return True
    return False


def check_basic_auth(cfg: WebConfig, authorization_header: str | None) -> bool:
    """True when the `Authorization` header holds a configured user and their password.

    True too when the file has no `basic_auth_users` (no auth required). Costs one bcrypt unless
    the credentials are cached or the header holds none; an unknown user costs a bcrypt at the
    configured cost too (`WebConfig.dummy_hash`). Thread-safe, and takes no global lock: the
    caller bounds how many run at once (the HTTP server's auth queue)."""
    if not cfg.basic_auth_users:
        return True
    found = _credentials(cfg, authorization_header)
    if found is None:
        return False
    key, password, hashed, known = found
    with _cache_lock:
        if known and key in _cache:
            _cache.move_to_end(key)
            return True
    try:
        ok = bcrypt.checkpw(password, hashed)
    except ValueError:  # longer than bcrypt's 72 bytes, or similar: never a match
        ok = False
    if not (ok and known):
        return False
    with _cache_lock:
        _cache[key] = None
        _cache.move_to_end(key)
        while len(_cache) > AUTH_CACHE_SIZE:
            _cache.popitem(last=False)
    return True


def authorize(cfg: WebConfig, headers: _Headers | Mapping[str, str]) -> tuple[bool, dict[str, str]]:
    """(allowed, response headers) for a request with these `headers`.

    The headers always hold the configured `http_server_config.headers`; when not allowed they
    also hold `WWW-Authenticate`. Send them on the response, whatever its status."""
    extra = dict(cfg.headers)
    if check_basic_auth(cfg, headers.get("Authorization")):
        return True, extra
    extra["WWW-Authenticate"] = f'Basic realm="{REALM}", charset="UTF-8"'
    return False, extra
