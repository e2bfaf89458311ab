"""Basic auth against the bcrypt hashes of a `WebConfig`, with a bounded cache of successful checks."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol

import bcrypt

from .webconfig import AUTH_CACHE_SIZE, REALM, WebConfig

log = logging.getLogger("warpwatch.webconfig")



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
