"""HTTP serving of /metrics, /healthz and /readyz: `server` (accept, bounds, TLS), `connection` (one
connection's limits and deadlines), `endpoints` (what each path answers), `auth` (the basic-auth
queue), `fds` (the descriptor limit and what it allows), `aiohttplog` (aiohttp's reports as one line),
`rejects` (what the server refuses, counted and logged by reason)."""

from .connection import Limits, describe_limits
from .endpoints import Endpoints, accepts_gzip
from .fds import http_limits, raise_nofile
from .rejects import REJECT_REASONS
from .server import HttpServer

__all__ = [
    "REJECT_REASONS",
    "Endpoints",
    "HttpServer",
    "Limits",
    "accepts_gzip",
    "describe_limits",
    "http_limits",
    "raise_nofile",
]
