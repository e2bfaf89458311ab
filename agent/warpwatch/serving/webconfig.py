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

Reading the file: `webfile`; TLS: `tls`; basic auth: `basicauth`.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError

log = logging.getLogger("warpwatch.webconfig")


AUTH_CACHE_SIZE = 100
"""Successful basic-auth checks remembered (exporter-toolkit keeps 100 too)."""
REALM = "warpwatch"

CLIENT_AUTH_TYPES = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
_UNSUPPORTED_CLIENT_AUTH = {
    "RequestClientCert": "requests a client certificate without verifying it",
    "RequireAnyClientCert": "requires a client certificate without verifying it",
    "RequireClientCert": "requires a client certificate without verifying it",
}
TLS_VERSIONS: Mapping[str, ssl.TLSVersion] = MappingProxyType(
    {
        "TLS10": ssl.TLSVersion.TLSv1,
        "TLS11": ssl.TLSVersion.TLSv1_1,
        "TLS12": ssl.TLSVersion.TLSv1_2,
        "TLS13": ssl.TLSVersion.TLSv1_3,
    }
)
CIPHER_SUITES: Mapping[str, str | None] = MappingProxyType(
    {
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
    }
)
_INSECURE_CIPHER_SUITES = frozenset(
    {
        "TLS_RSA_WITH_RC4_128_SHA",
        "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
        "TLS_RSA_WITH_AES_128_CBC_SHA256",
        "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
        "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
        "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    }
)
CURVES: Mapping[str, str] = MappingProxyType(
    {
        "CurveP256": "prime256v1",
        "CurveP384": "secp384r1",
        "CurveP521": "secp521r1",
        "X25519": "X25519",
    }
)
EXTRA_HEADERS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        # header -> accepted values (empty: any), exactly exporter-toolkit's list.
        "Strict-Transport-Security": (),
        "X-Content-Type-Options": ("nosniff",),
        "X-Frame-Options": ("deny", "sameorigin"),
        "X-XSS-Protection": (),
        "Content-Security-Policy": (),
    }
)

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
_TLS_KEYS = (
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
)
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
        default_factory=lambda: MappingProxyType({}), repr=False, hash=False, compare=False
    )
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


class ConfigReader:
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
