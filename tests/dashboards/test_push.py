"""`warpwatch dashboards push` against a stand-in for Grafana's HTTP API.

Grafana itself cannot run on these machines, so `FakeGrafana` below stands in for it: a small
HTTP server that implements the endpoints push uses (folders, dashboards by uid, alert-rule
provisioning) with Grafana's status codes and `{"message": ...}` error bodies, and records every
request so the tests can check method, path, Authorization header and body exactly.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from warpwatch.dashboards import DEFAULT_SETTINGS, register, rules
from warpwatch.dashboards.alerts import alerts
from warpwatch.dashboards.boards import dashboards
from warpwatch.dashboards.grafana import all_dashboards
from warpwatch.dashboards.push import (
    GrafanaClient,
    GrafanaError,
    GrafanaUnreachableError,
    push,
    token_from_env,
)
from warpwatch.errors import ConfigError

TOKEN = "glsa_test-token-0123456789"
FOLDER = DEFAULT_SETTINGS.folder_uid
RULE_PATH = "/api/v1/provisioning/alert-rules"


@dataclass
class Request:
    method: str
    path: str
    auth: str | None
    body: Any


@dataclass
class FakeGrafana:
    """State and request log of the stand-in; `fail` forces (status, body) for every request."""

    folders: dict[str, str] = field(default_factory=dict)
    boards: dict[str, dict[str, Any]] = field(default_factory=dict)
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    log: list[Request] = field(default_factory=list)
    fail: tuple[int, bytes] | None = None
    url: str = ""

    def handle(self, method: str, path: str, auth: str | None, body: Any) -> tuple[int, Any]:
        self.log.append(Request(method, path, auth, body))
        if auth != f"Bearer {TOKEN}":
            return 401, {"message": "invalid API key"}
        if method == "GET" and path.startswith("/api/folders/"):
            uid = path.rsplit("/", 1)[1]
            if uid not in self.folders:
                return 404, {"message": "folder not found"}
            return 200, {"uid": uid, "title": self.folders[uid]}
        if (method, path) == ("POST", "/api/folders"):
            if body["uid"] in self.folders:
                return 409, {"message": "a folder with the same uid already exists"}
            self.folders[body["uid"]] = body["title"]
            return 200, {"uid": body["uid"], "title": body["title"]}
        if method == "GET" and path.startswith("/api/dashboards/uid/"):
            uid = path.rsplit("/", 1)[1]
            if uid not in self.boards:
                return 404, {"message": "Dashboard not found"}
            stored = self.boards[uid]
            return 200, {"dashboard": stored["dashboard"], "meta": {"folderUid": stored["folderUid"]}}
        if (method, path) == ("POST", "/api/dashboards/db"):
            if body["folderUid"] not in self.folders:
                return 400, {"message": "folder not found"}
            uid = body["dashboard"]["uid"]
            version = self.boards[uid]["dashboard"]["version"] + 1 if uid in self.boards else 1
            if uid in self.boards and not body["overwrite"]:
                return 412, {"message": "The dashboard has been changed by someone else"}
            dashboard = {**body["dashboard"], "id": 7, "version": version}
            self.boards[uid] = {"dashboard": dashboard, "folderUid": body["folderUid"]}
            return 200, {"status": "success", "uid": uid, "version": version, "url": f"/d/{uid}"}
        if method == "PUT" and path.startswith(RULE_PATH + "/"):
            uid = path.rsplit("/", 1)[1]
            if uid not in self.rules:
                return 404, {"message": "rule not found"}
            self.rules[uid] = body
            return 200, body
        if (method, path) == ("POST", RULE_PATH):
            if body["uid"] in self.rules:
                return 409, {"message": "rule uid already exists"}
            if body["folderUID"] not in self.folders:
                return 400, {"message": "folder does not exist"}
            self.rules[body["uid"]] = body
            return 201, body
        return 404, {"message": "Not found"}


@pytest.fixture
def grafana(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGrafana]:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    state = FakeGrafana()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            if state.fail is not None:
                state.log.append(Request(self.command, self.path, self.headers.get("Authorization"), body))
                status, raw = state.fail
            else:
                status, payload = state.handle(self.command, self.path, self.headers.get("Authorization"), body)
                raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def client(url: str, token: str = TOKEN) -> GrafanaClient:
    return GrafanaClient(url, token, timeout_s=5)


def push_all(grafana: FakeGrafana, with_rules: bool = True) -> list[str]:
    api_rules = rules.grafana_api_rules(DEFAULT_SETTINGS) if with_rules else None
    return push(client(grafana.url), all_dashboards(DEFAULT_SETTINGS), FOLDER, DEFAULT_SETTINGS.folder_title, api_rules)


@pytest.mark.slow
def test_first_push_creates_folder_dashboards_and_rules(grafana: FakeGrafana) -> None:
    done = push_all(grafana)
    board_uids = [d.uid for d in dashboards()]
    rule_uids = [a.uid for a in alerts()]
    assert done == [
        f"folder {FOLDER}: created",
        *(f"dashboard {uid}: created (version 1)" for uid in board_uids),
        *(f"alert rule {uid}: created" for uid in rule_uids),
    ]
    assert [(r.method, r.path) for r in grafana.log] == [
        ("GET", f"/api/folders/{FOLDER}"),
        ("POST", "/api/folders"),
        *(
            step
            for uid in board_uids
            for step in (("GET", f"/api/dashboards/uid/{uid}"), ("POST", "/api/dashboards/db"))
        ),
        *(step for uid in rule_uids for step in (("PUT", f"{RULE_PATH}/{uid}"), ("POST", RULE_PATH))),
    ]
    assert all(r.auth == f"Bearer {TOKEN}" for r in grafana.log)
    assert grafana.log[1].body == {"uid": FOLDER, "title": DEFAULT_SETTINGS.folder_title}
    saves = [r.body for r in grafana.log if r.path == "/api/dashboards/db"]
    for body, (name, board) in zip(saves, all_dashboards(DEFAULT_SETTINGS).items(), strict=True):
        assert body == {
            "dashboard": {**board, "id": None},
            "folderUid": FOLDER,
            "overwrite": True,
            "message": "warpwatch dashboards push",
        }, name
    posted = [r.body for r in grafana.log if (r.method, r.path) == ("POST", RULE_PATH)]
    assert posted == rules.grafana_api_rules(DEFAULT_SETTINGS)
    for body in posted:
        assert body["folderUID"] == FOLDER and body["condition"] == "C" and body["ruleGroup"]
    assert set(grafana.rules) == set(rule_uids)


@pytest.mark.slow
def test_second_push_changes_nothing(grafana: FakeGrafana) -> None:
    push_all(grafana)
    boards_before = json.dumps(grafana.boards, sort_keys=True)
    rules_before = json.dumps(grafana.rules, sort_keys=True)
    grafana.log.clear()
    done = push_all(grafana)
    assert done == [
        f"folder {FOLDER}: exists",
        *(f"dashboard {d.uid}: unchanged" for d in dashboards()),
        *(f"alert rule {a.uid}: updated" for a in alerts()),
    ]
    assert {r.method for r in grafana.log} == {"GET", "PUT"}, "no POST: nothing created twice"
    assert json.dumps(grafana.boards, sort_keys=True) == boards_before  # no new dashboard versions
    assert json.dumps(grafana.rules, sort_keys=True) == rules_before


@pytest.mark.slow
def test_changed_dashboard_is_saved_again(grafana: FakeGrafana) -> None:
    push_all(grafana, with_rules=False)
    grafana.boards["warpwatch-kernels"]["dashboard"]["title"] = "edited in the UI"
    done = push_all(grafana, with_rules=False)
    assert "dashboard warpwatch-kernels: updated (version 2)" in done
    assert grafana.boards["warpwatch-kernels"]["dashboard"]["title"] == "warpwatch / Kernels"


@pytest.mark.slow
def test_dashboards_only_without_alerts_flag(grafana: FakeGrafana) -> None:
    push_all(grafana, with_rules=False)
    assert not any(r.path.startswith(RULE_PATH) for r in grafana.log)


@pytest.mark.slow
def test_rejected_token_is_a_clear_error_without_the_token(grafana: FakeGrafana) -> None:
    with pytest.raises(GrafanaError) as info:
        push(client(grafana.url, token="wrong-token"), {}, FOLDER, "warpwatch")
    err = info.value
    assert err.status == 401
    assert str(err) == (
        f"Grafana GET /api/folders/{FOLDER} answered 401: invalid API key "
        "(check that GRAFANA_TOKEN holds a valid token with Editor or Admin rights)"
    )
    assert "wrong-token" not in str(err) and "wrong-token" not in repr(client(grafana.url, "wrong-token"))


@pytest.mark.slow
def test_grafana_message_is_quoted_even_when_not_json(grafana: FakeGrafana) -> None:
    grafana.fail = (502, b"upstream connect error")
    expected = r"^Grafana GET /api/folders/warpwatch answered 502: upstream connect error$"
    with pytest.raises(GrafanaError, match=expected):
        push_all(grafana)
    grafana.fail = (400, json.dumps({"message": "invalid alert rule: for must be positive"}).encode())
    with pytest.raises(GrafanaError, match=r"answered 400: invalid alert rule: for must be positive$"):
        push_all(grafana)


def test_unreachable_grafana() -> None:
    with pytest.raises(GrafanaUnreachableError, match=r"^cannot reach Grafana at http://127.0.0.1:9: "):
        push(client("http://127.0.0.1:9"), {}, FOLDER, "warpwatch")


def test_token_and_url_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"^GRAFANA_TOKEN is not set: create a Grafana service-account token"):
        token_from_env({"GRAFANA_TOKEN": "  "})
    assert token_from_env({"GRAFANA_TOKEN": TOKEN}) == TOKEN
    with pytest.raises(ConfigError, match=r"--grafana-url 'grafana:3000' is not an http\(s\) URL"):
        GrafanaClient("grafana:3000", TOKEN)


@pytest.mark.slow
def test_cli_push_reads_the_token_from_the_environment_and_never_prints_it(
    grafana: FakeGrafana, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GRAFANA_TOKEN", TOKEN)
    parser = argparse.ArgumentParser(prog="warpwatch")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["dashboards", "push", "--grafana-url", grafana.url, "--alerts"])
    assert args.func(args) == 0
    out = capsys.readouterr()
    assert f"folder {FOLDER}: created" in out.out and "alert rule warpwatch-windows-failing: created" in out.out
    assert TOKEN not in out.out + out.err
    assert set(grafana.rules) == {a.uid for a in alerts()}
    monkeypatch.delenv("GRAFANA_TOKEN")
    with pytest.raises(ConfigError, match="GRAFANA_TOKEN is not set"):
        args.func(args)
