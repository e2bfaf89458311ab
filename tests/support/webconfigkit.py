"""Helpers of tests/serving/test_webconfig.py and test_webconfig_tls.py."""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from support.pki import HASH, USER, Pki
from support.tlsserver import secure_server
from warpwatch.logs import TextFormatter
from warpwatch.serving.basicauth import BasicAuth
from warpwatch.serving.webconfig import WebConfig

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


METRICS = b"# TYPE webconfig_test gauge\nwebconfig_test 1\n"


def write_config(tmp_path: Path, text: str, name: str = "web-config.yml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def tls_config(pki: Pki, tmp_path: Path, extra_tls: str = "", rest: str = "", users: bool = True) -> Path:
    """A config with TLS (absolute paths), the test user unless `users` is False, and more YAML."""
    text = (
        f"tls_server_config:\n  cert_file: {pki.server_crt}\n  key_file: {pki.server_key}\n{extra_tls}"
        + (f"basic_auth_users:\n  {USER}: {HASH}\n" if users else "")
        + rest
    )
    return write_config(tmp_path, text)


def _handler(cfg: WebConfig) -> type[BaseHTTPRequestHandler]:
    auth = BasicAuth(cfg)  # one per server, as the agent's server has

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            allowed, extra = auth.authorize(self.headers)
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


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every record as the agent would print it, structured fields included."""
    fmt = TextFormatter()
    return "\n".join(fmt.format(r) for r in caplog.records)
