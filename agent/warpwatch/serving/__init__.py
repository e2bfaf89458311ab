"""HTTP serving of /metrics, /healthz and /readyz: `server` (connections, limits, TLS), `endpoints`
(what each path answers), `auth` (the basic-auth queue)."""

from .endpoints import Endpoints, accepts_gzip
from .server import REJECT_REASONS, HttpServer, Limits, describe_limits

__all__ = ["REJECT_REASONS", "Endpoints", "HttpServer", "Limits", "accepts_gzip", "describe_limits"]
