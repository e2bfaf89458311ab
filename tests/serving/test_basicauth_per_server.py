"""Each server checks basic auth with its own state: a check one server made never answers for another.

Two agents' servers in one process (or one server restarted with a new web config) with the same
user: the second must run its own bcrypt for its first request, and its cache holds only its own
checks. bcrypt.checkpw is counted to see which server verified what.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from support.pki import HASH, PASSWORD, USER, basic, get
from support.reachable import reachable
from warpwatch.serving import Endpoints, HttpServer
from warpwatch.serving.basicauth import BasicAuth
from warpwatch.serving.webconfig import WebConfig
from warpwatch.serving.webfile import load_web_config

BODY = b"# TYPE test_metric gauge\ntest_metric 1\n"


@pytest.fixture
def bcrypts(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The hashes bcrypt.checkpw was called with, in order."""
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    return calls


def web_config(tmp_path: Path) -> WebConfig:
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  {USER}: {HASH}\n")
    return load_web_config(path)


def test_two_basic_auths_keep_their_own_checks(tmp_path: Path, bcrypts: list[bytes]) -> None:
    cfg = web_config(tmp_path)
    first, second = BasicAuth(cfg), BasicAuth(cfg)
    assert first.check(basic(USER, PASSWORD)) and first.cached(basic(USER, PASSWORD))
    assert len(first) == 1 and len(bcrypts) == 1
    assert not second.cached(basic(USER, PASSWORD)), "the second never checked these credentials"
    assert len(second) == 0
    assert second.check(basic(USER, PASSWORD))
    assert len(bcrypts) == 2, "the second ran a bcrypt of its own"
    shared = reachable(cfg, bytes)  # the hashes of the web config both read
    own = [reachable(auth, bytes) - shared for auth in (first, second)]
    assert own[0] and not own[0] & own[1]  # the cache entries are keyed per instance too


@contextlib.contextmanager
def server(web: WebConfig) -> Iterator[HttpServer]:
    http = HttpServer(
        Endpoints(lambda accept: (BODY, "text/plain; version=0.0.4"), lambda: (True, "ready"), web),
        "127.0.0.1",
        0,
        web=web,
    )
    http.start()
    try:
        yield http
    finally:
        http.stop()


def test_two_servers_do_not_share_their_basic_auth_cache(tmp_path: Path, bcrypts: list[bytes]) -> None:
    web = web_config(tmp_path)
    auth = basic(USER, PASSWORD)
    with server(web) as a, server(web) as b:
        assert get(f"http://127.0.0.1:{a.port}/metrics", auth=auth).status == 200
        assert get(f"http://127.0.0.1:{a.port}/metrics", auth=auth).status == 200
        assert len(bcrypts) == 1, "server a answered its second request from its cache"
        assert get(f"http://127.0.0.1:{b.port}/metrics", auth=auth).status == 200
        assert len(bcrypts) == 2, "server b checked the credentials itself, not from server a's cache"
        assert a.endpoints.auth is not None and b.endpoints.auth is not None
        assert a.endpoints.auth.basic is not b.endpoints.auth.basic
