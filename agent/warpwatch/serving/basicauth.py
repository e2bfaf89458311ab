"""Basic auth against the bcrypt hashes of a `WebConfig`, with a bounded cache of successful checks.

Each `BasicAuth` holds its own cache (and its own key for the cache's entries): one per server, so
that two servers in one process, with the same or different users, never answer from each other's
checks."""

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


class BasicAuth:
    """The basic-auth checks of one server: its `WebConfig` and its cache of successful checks."""

    def __init__(self, cfg: WebConfig, cache_size: int = AUTH_CACHE_SIZE) -> None:
        self.cfg = cfg
        self.cache_size = cache_size
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self._key = os.urandom(32)

    def __len__(self) -> int:
        """How many successful checks are remembered."""
        with self._lock:
            return len(self._cache)

    def cached(self, authorization_header: str | None) -> bool:
        """True when these credentials were verified before (the cache): no bcrypt needed.

        The HTTP server answers such requests at once and queues the others for `check`."""
        if not self.cfg.basic_auth_users:
            return True
        found = self._credentials(authorization_header)
        return found is not None and found[3] and self._remembered(found[0])

    def check(self, authorization_header: str | None) -> bool:
        """True when the `Authorization` header holds a configured user and their password.

        True too when the file has no `basic_auth_users` (no auth required). Costs one bcrypt unless
        the credentials are cached or the header holds none; an unknown user costs a bcrypt at the
        configured cost too (`WebConfig.dummy_hash`). Thread-safe, and holds no lock during the
        bcrypt: the caller bounds how many run at once (the HTTP server's auth queue)."""
        if not self.cfg.basic_auth_users:
            return True
        found = self._credentials(authorization_header)
        if found is None:
            return False
        key, password, hashed, known = found
        if known and self._remembered(key):
            return True
        try:
            ok = bcrypt.checkpw(password, hashed)
        except ValueError:  # longer than bcrypt's 72 bytes, or similar: never a match
            ok = False
        if ok and known:
            self._remember(key)
        return ok and known

    def authorize(self, headers: _Headers | Mapping[str, str]) -> tuple[bool, dict[str, str]]:
        """(allowed, response headers) for a request with these `headers`.

        The headers always hold the configured `http_server_config.headers`; when not allowed they
        also hold `WWW-Authenticate`. Send them on the response, whatever its status."""
        extra = dict(self.cfg.headers)
        if self.check(headers.get("Authorization")):
            return True, extra
        extra["WWW-Authenticate"] = f'Basic realm="{REALM}", charset="UTF-8"'
        return False, extra

    def _credentials(self, authorization_header: str | None) -> tuple[bytes, bytes, bytes, bool] | None:
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
        stored = self.cfg.basic_auth_users.get(user) if user is not None else None
        hashed = stored if stored is not None else self.cfg.dummy_hash
        return self._cache_id(user_b, hashed, password), password, hashed, stored is not None

    def _cache_id(self, user: bytes, hashed: bytes, password: bytes) -> bytes:
        """What the cache keeps of a check: an HMAC under this instance's key, never the password."""
        msg = b"\0".join((hashlib.sha256(user).digest(), hashlib.sha256(hashed).digest(), password))
        return hmac.new(self._key, msg, hashlib.sha256).digest()

    def _remembered(self, key: bytes) -> bool:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return True
        return False

    def _remember(self, key: bytes) -> None:
        with self._lock:
            self._cache[key] = None
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)


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
