"""Create or update warpwatch's dashboards and alert rules in a running Grafana (HTTP API, stdlib only).

The token comes from `GRAFANA_TOKEN` (a service-account token, sent as a Bearer token) and is
never logged or put into an error message. Pushing twice changes nothing the second time:
the folder is created only when missing, a dashboard is saved only when its JSON differs from
Grafana's copy, and alert rules are updated in place by uid (created when absent).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, WarpwatchError

TOKEN_ENV = "GRAFANA_TOKEN"
PUSH_MESSAGE = "warpwatch dashboards push"
_IGNORED_ON_COMPARE = ("id", "version")


class GrafanaError(WarpwatchError):
    """Grafana answered a request with an error status; the message quotes Grafana's own."""

    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        self.method, self.path, self.status, self.grafana_message = method, path, status, message
        hint = ""
        if status in (401, 403):
            hint = f" (check that {TOKEN_ENV} holds a valid token with Editor or Admin rights)"
        super().__init__(f"Grafana {method} {path} answered {status}: {message}{hint}")


class GrafanaUnreachableError(WarpwatchError):
    """No HTTP answer from Grafana at all (refused, DNS, TLS, time-out)."""


def token_from_env(environ: Mapping[str, str]) -> str:
    token = environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise ConfigError(
            f"{TOKEN_ENV} is not set: create a Grafana service-account token (role Editor, or Admin "
            f"for alert rules) and export it as {TOKEN_ENV}"
        )
    return token


@dataclass(frozen=True)
class GrafanaClient:
    """A minimal JSON client for Grafana's HTTP API."""

    base_url: str
    token: str = field(repr=False)
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlparse(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"--grafana-url {self.base_url!r} is not an http(s) URL such as http://grafana:3000")

    def request(self, method: str, path: str, body: Any = None, *, accept: tuple[int, ...] = ()) -> tuple[int, Any]:
        """Send one request; return (status, decoded JSON). Error statuses not in `accept` raise."""
        data = None if body is None else json.dumps(body, sort_keys=True).encode()
        req = urllib.request.Request(self.base_url.rstrip("/") + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as exc:
            payload = _decode(exc.read())
            if exc.code in accept:
                return exc.code, payload
            raise GrafanaError(method, path, exc.code, _message(payload, exc.reason)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise GrafanaUnreachableError(f"cannot reach Grafana at {self.base_url}: {reason}") from None


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:300]


def _message(payload: Any, reason: str) -> str:
    if isinstance(payload, dict) and payload.get("message"):
        return str(payload["message"])
    if isinstance(payload, str) and payload.strip():
        return payload.strip()
    return reason or "no message"


def ensure_folder(client: GrafanaClient, uid: str, title: str) -> str:
    status, _ = client.request("GET", f"/api/folders/{urllib.parse.quote(uid)}", accept=(404,))
    if status != 404:
        return f"folder {uid}: exists"
    client.request("POST", "/api/folders", {"uid": uid, "title": title})
    return f"folder {uid}: created"


def _comparable(board: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in board.items() if k not in _IGNORED_ON_COMPARE}


def push_dashboard(client: GrafanaClient, board: Mapping[str, Any], folder_uid: str) -> str:
    uid = str(board["uid"])
    status, current = client.request("GET", f"/api/dashboards/uid/{urllib.parse.quote(uid)}", accept=(404,))
    if status != 404 and isinstance(current, dict):
        same_folder = current.get("meta", {}).get("folderUid") == folder_uid
        if same_folder and _comparable(current.get("dashboard", {})) == _comparable(board):
            return f"dashboard {uid}: unchanged"
    _, saved = client.request(
        "POST",
        "/api/dashboards/db",
        {
            "dashboard": {**board, "id": None},
            "folderUid": folder_uid,
            "overwrite": True,
            "message": PUSH_MESSAGE,
        },
    )
    version = saved.get("version") if isinstance(saved, dict) else None
    verb = "created" if status == 404 else "updated"
    return f"dashboard {uid}: {verb} (version {version})"


def push_alert_rule(client: GrafanaClient, rule: Mapping[str, Any]) -> str:
    uid = str(rule["uid"])
    status, _ = client.request(
        "PUT", f"/api/v1/provisioning/alert-rules/{urllib.parse.quote(uid)}", rule, accept=(404,)
    )
    if status != 404:
        return f"alert rule {uid}: updated"
    client.request("POST", "/api/v1/provisioning/alert-rules", rule)
    return f"alert rule {uid}: created"


def push(
    client: GrafanaClient,
    boards: Mapping[str, Mapping[str, Any]],
    folder_uid: str,
    folder_title: str,
    rules: list[dict[str, Any]] | None = None,
    report: Callable[[str], None] = lambda line: None,
) -> list[str]:
    """Folder, then every dashboard, then (when given) every alert rule; returns what was done."""
    done = [ensure_folder(client, folder_uid, folder_title)]
    report(done[-1])
    for board in boards.values():
        done.append(push_dashboard(client, board, folder_uid))
        report(done[-1])
    for rule in rules or []:
        done.append(push_alert_rule(client, rule))
        report(done[-1])
    return done
