"""`warpwatch evidence` when the agent cannot be reached: what happened, and what to try."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

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


def test_the_port_forward_keeps_the_agents_port_when_the_url_has_it() -> None:
    from warpwatch.commands.evidence import Agent

    message = Agent("http://user:secret@localhost:9946")._unreachable("/evidence", ConnectionRefusedError(111, "x"))
    assert message.endswith("kubectl -n NAMESPACE port-forward pod/POD 9946")
    assert "secret" not in message
