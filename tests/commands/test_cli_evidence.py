"""`warpwatch evidence` when the agent cannot be reached: what happened, and what to try."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from warpwatch.commands.cli import main


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 where nothing listens: bound (so no one else takes it), never listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.mark.parametrize("verb", ["pull", "diff"])
def test_a_refused_connection_says_to_check_the_agent_and_how_to_port_forward(
    verb: str, refused_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{refused_port}"
    argv = ["evidence", verb, url] + (["-o", str(tmp_path)] if verb == "pull" else [])
    assert main(argv) == 1
    assert capsys.readouterr().err == (
        f"warpwatch: error: cannot connect to {url}: connection refused; is the agent running? If it runs in "
        f"Kubernetes, start a port-forward: kubectl -n NAMESPACE port-forward pod/POD {refused_port}:9946\n"
    )


def test_the_port_forward_keeps_the_agents_port_when_the_url_has_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent's own port (9946) may be taken on this machine: the connection is refused
    whatever listens there, by a stand-in for urllib's `urlopen`."""

    def refused(*args: object, **kwargs: object) -> NoReturn:
        raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))

    monkeypatch.setattr(urllib.request, "urlopen", refused)
    assert main(["evidence", "diff", "http://user:secret@localhost:9946"]) == 1
    message = capsys.readouterr().err
    assert message.endswith("kubectl -n NAMESPACE port-forward pod/POD 9946\n")
    assert "secret" not in message
