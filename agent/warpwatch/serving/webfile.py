"""Reading a web-config file (`webconfig` says what it holds): strict YAML, every key checked, errors that name
the file and the key and never a secret."""

from __future__ import annotations

import difflib
import logging
import os
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from ..logs import event
from .tls import build_context
from .webconfig import (
    _BCRYPT_RE,
    _HTTP_KEYS,
    _INSECURE_CIPHER_SUITES,
    _TLS_KEYS,
    _TOP_KEYS,
    _UNSUPPORTED_CLIENT_AUTH,
    CIPHER_SUITES,
    CLIENT_AUTH_TYPES,
    CURVES,
    EXTRA_HEADERS,
    TLS_VERSIONS,
    ConfigReader,
    TLSServerConfig,
    WebConfig,
)

log = logging.getLogger("warpwatch.webconfig")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (Go's strict YAML decoding does too)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def load_web_config(path: Path) -> WebConfig:
    """Read and validate a web-config file; build its TLS context once to check the files.

    Raises `ConfigError` naming the file and the key (never quoting a secret)."""
    path = Path(path).absolute()
    r = ConfigReader(path)
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

    cfg = WebConfig(path=path, tls=tls, headers=headers, http2=http2, basic_auth_users=MappingProxyType(users))
    if tls is not None:
        build_context(cfg, tls)  # fail now, not at the first connection
    event(log, "web_config_loaded", **cfg.describe())
    if "http2" in http and http2:
        event(
            log,
            "web_config_http2_ignored",
            web_config=os.fspath(path),
            reason="warpwatch serves HTTP/1.1 only; http_server_config.http2 has no effect",
        )
    return cfg


def _yaml_problem(exc: Exception) -> str:
    """Where and what, without the excerpt of the file that PyYAML quotes (it may hold a secret)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    if mark is None:
        return str(problem)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"


def _read_tls(r: ConfigReader, raw: Any) -> TLSServerConfig | None:
    k = "tls_server_config"
    t = r.mapping(raw, k, _TLS_KEYS)
    if not any(
        t.get(name) not in (None, "")
        for name in ("cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file", "client_auth_type")
    ):
        # exporter-toolkit: no certificate, key, CA nor client auth set -> plain HTTP.
        for name in t:
            if t[name] not in (None, "", []):
                raise r.fail(f"{k}.{name}", "set, but TLS is off: cert_file and key_file are missing")
        return None
    if t.get("cert"):
        raise r.fail(
            f"{k}.cert",
            "inline certificates are not supported (Python's ssl loads them from files); "
            "put it in a file and set cert_file",
        )
    if t.get("key"):
        raise r.fail(
            f"{k}.key",
            "inline keys are not supported (Python's ssl loads them from files); "
            "put the key in a file and set key_file",
        )
    if not t.get("cert_file"):
        raise r.fail(f"{k}.cert_file", "missing (TLS needs cert_file and key_file)")
    if not t.get("key_file"):
        raise r.fail(f"{k}.key_file", "missing (TLS needs cert_file and key_file)")
    cert_file = r.file(t["cert_file"], f"{k}.cert_file")
    key_file = r.file(t["key_file"], f"{k}.key_file")
    auth, ca_file, ca_text, sans = _read_client_auth(r, t, k)
    versions = _read_versions(r, t, k)
    suites = _read_cipher_suites(r, t, k)
    prefer = (
        r.boolean(t["prefer_server_cipher_suites"], f"{k}.prefer_server_cipher_suites")
        if t.get("prefer_server_cipher_suites") is not None
        else True
    )
    curves = r.strings(t.get("curve_preferences"), f"{k}.curve_preferences")
    for i, c in enumerate(curves):
        if c not in CURVES:
            raise r.fail(f"{k}.curve_preferences[{i}]", f"unknown curve {c!r}; expected one of {', '.join(CURVES)}")
    if len(curves) > 1:
        raise r.fail(f"{k}.curve_preferences", "Python's ssl can set only one curve; list exactly one")
    return TLSServerConfig(
        cert_file=cert_file,
        key_file=key_file,
        client_auth_type=auth,
        client_ca_file=ca_file,
        client_ca=ca_text,
        client_allowed_sans=sans,
        min_version=versions["min_version"],
        max_version=versions["max_version"],
        cipher_suites=suites,
        prefer_server_cipher_suites=prefer,
        curve_preferences=curves,
    )


def _read_client_auth(
    r: ConfigReader, t: dict[str, Any], k: str
) -> tuple[str, Path | None, str | None, tuple[str, ...]]:
    """client_auth_type, client_ca_file, client_ca and client_allowed_sans, checked together."""
    auth = r.string(t.get("client_auth_type") or "NoClientCert", f"{k}.client_auth_type")
    if auth in _UNSUPPORTED_CLIENT_AUTH:
        raise r.fail(
            f"{k}.client_auth_type",
            f"{auth!r} is not supported: it {_UNSUPPORTED_CLIENT_AUTH[auth]}, which Python's ssl "
            "cannot do; use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with client_ca_file",
        )
    if auth not in CLIENT_AUTH_TYPES:
        hint = difflib.get_close_matches(auth, CLIENT_AUTH_TYPES, n=1)
        raise r.fail(
            f"{k}.client_auth_type",
            f"unknown value {auth!r}; expected one of "
            f"{', '.join(CLIENT_AUTH_TYPES)}" + (f" (did you mean {hint[0]!r}?)" if hint else ""),
        )
    ca_file = r.file(t["client_ca_file"], f"{k}.client_ca_file") if t.get("client_ca_file") else None
    ca_text = r.string(t["client_ca"], f"{k}.client_ca") if t.get("client_ca") else None
    if ca_file is not None and ca_text is not None:
        raise r.fail(f"{k}.client_ca", "set both client_ca and client_ca_file; keep one")
    if auth == "NoClientCert" and (ca_file or ca_text):
        raise r.fail(
            f"{k}.client_auth_type",
            "client CAs are configured but client_auth_type is NoClientCert; set RequireAndVerifyClientCert",
        )
    if auth != "NoClientCert" and not (ca_file or ca_text):
        raise r.fail(
            f"{k}.client_ca_file",
            f"client_auth_type {auth} needs client_ca_file (the CA that signs the client certificates)",
        )
    sans = r.strings(t.get("client_allowed_sans"), f"{k}.client_allowed_sans")
    if sans and auth != "RequireAndVerifyClientCert":
        raise r.fail(f"{k}.client_allowed_sans", "needs client_auth_type RequireAndVerifyClientCert")
    return auth, ca_file, ca_text, sans


def _read_versions(r: ConfigReader, t: dict[str, Any], k: str) -> dict[str, str]:
    versions = {}
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        v = r.string(t.get(name) or default, f"{k}.{name}")
        if v not in TLS_VERSIONS:
            raise r.fail(f"{k}.{name}", f"unknown TLS version {v!r}; expected one of {', '.join(TLS_VERSIONS)}")
        versions[name] = v
    if TLS_VERSIONS[versions["min_version"]] > TLS_VERSIONS[versions["max_version"]]:
        raise r.fail(f"{k}.min_version", f"{versions['min_version']} is above max_version {versions['max_version']}")
    return versions


def _read_cipher_suites(r: ConfigReader, t: dict[str, Any], k: str) -> tuple[str, ...]:
    suites = r.strings(t.get("cipher_suites"), f"{k}.cipher_suites")
    for i, s in enumerate(suites):
        if s in _INSECURE_CIPHER_SUITES:
            raise r.fail(f"{k}.cipher_suites[{i}]", f"{s} is insecure; exporter-toolkit does not accept it either")
        if s not in CIPHER_SUITES:
            hint = difflib.get_close_matches(s, CIPHER_SUITES, n=1)
            raise r.fail(
                f"{k}.cipher_suites[{i}]",
                f"unknown cipher suite {s!r}"
                + (f"; did you mean {hint[0]!r}?" if hint else "; use Go's crypto/tls names"),
            )
    return suites


def _read_headers(r: ConfigReader, raw: Any) -> tuple[tuple[str, str], ...]:
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


def _read_users(r: ConfigReader, raw: Any) -> dict[str, bytes]:
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
            raise r.fail(
                f"{k}.{user}",
                "not a bcrypt hash (expected $2a$, $2b$ or $2y$, a cost 04-31 and 53 "
                "characters of salt and hash, e.g. from htpasswd -nBC 10 \"\" | tr -d ':\\n')",
            )
        users[user] = hashed.encode()
    return users
