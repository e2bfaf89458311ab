"""Capture through vLLM's and SGLang's own profiling endpoints.

Both servers can start and stop `torch.profiler` in their workers on request and write one
Kineto trace per worker (tensor-parallel rank) into a folder. A window here is:

1. list the trace folder (the names present now are never this window's);
2. `POST {url}/start_profile`;
3. wait `window_s`;
4. `POST {url}/stop_profile` (both servers answer only after the workers have written their
   traces, which can take minutes for a long, CPU-heavy trace);
5. poll the folder for new trace files until each is complete (size unchanged between two polls
   and a complete gzip stream, see `warpwatch.capture.files`), bounded by `flush_timeout_s`
   and by the service's `timeout_s`, whichever is shorter.

The agent must see the server's trace folder (a shared volume); `trace_dir` is that folder as
the agent sees it.

Expected failures never raise: `capture()` returns `CapturedWindow(path=None,
outcome="failed" | "timed_out", error=...)`. After a failure to start or stop (profiling
disabled, refused token, server unreachable or gone) the source backs off exponentially
(`backoff_s`, doubling up to `max_backoff_s`): while backing off, `capture()` returns [] without
touching the server. Connection attempts that never reached the server (refused, unreachable)
are retried `max_retries` times with a short doubling pause; requests that may have reached it
(time-out, reset) are not repeated. A bearer token is read from the environment variable
`token_env` at each request and sent as `Authorization: Bearer ...`; it is never logged.
Redirects are not followed (the token must not travel to another host) and no HTTP proxy is
used.

Server versions followed:

- vLLM: `vllm/entrypoints/serve/profile/api_router.py` (v0.13+, enabled by
  `--profiler-config '{"profiler": "torch", "torch_profiler_dir": DIR}'`) and the older
  `vllm/entrypoints/openai/api_server.py` routes (enabled by `VLLM_TORCH_PROFILER_DIR=DIR`).
  Without either, the routes do not exist: 404. Both routes take no body and answer 200 with
  an empty body; `stop_profile` returns once every worker has written its trace. Workers write
  `tensorboard_trace_handler` files `{worker}.{time_ns}.pt.trace.json.gz`, where `worker` is
  `{instance_id}-rank-{rank}` (v0.6+) or the handler's default `{host}_{pid}` (older);
  `.pt.trace.json` when `torch_profiler_use_gzip` is off.
- SGLang: v0.5 (`python/sglang/srt/entrypoints/http_server.py`, `ProfileReqInput` in
  `python/sglang/srt/managers/io_struct.py`, docs "Profile a server with HTTP API
  endpoints"). Profiling needs no server flag; `POST /start_profile` takes JSON
  `{"output_dir", "start_step", "num_steps", "activities", "with_stack", "record_shapes",
  "profile_by_stage", "merge_profiles", ...}` (all optional; `output_dir` defaults to the
  server's `SGLANG_TORCH_PROFILER_DIR`, else /tmp) and answers 200 "Start profiling."; without
  `num_steps` profiling runs until `POST /stop_profile`, which answers 200 after every rank
  wrote `[{prefix}-]{profile_id}-TP-{tp}[-DP-{dp}][-PP-{pp}][-EP-{ep}].trace.json.gz`
  (`profile_id` = the server's `time.time()` at start). Starting while a profile runs, or
  stopping when none runs, raises inside the server: 500 "Internal Server Error". We send
  `output_dir`, `activities` (default `["GPU"]`: kernels only, the lightest trace),
  `with_stack: false` and `record_shapes: false`, and no `num_steps`: the window is wall-clock
  time, and a step-bounded profile on an idle server would never end.
"""

from __future__ import annotations

import errno
import http.client
import json
import logging
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from warpwatch.capture import CapturedWindow, Outcome
from warpwatch.capture.files import TEMP_SUFFIXES, SettleTracker
from warpwatch.errors import CaptureError, ConfigError

__all__ = ["DEFAULT_TOKEN_ENV", "SglangSource", "VllmSource"]

log = logging.getLogger("warpwatch.capture.servers")

DEFAULT_TOKEN_ENV = "WARPWATCH_SERVER_TOKEN"

_MTIME_SLACK_S = 2.0
"""A new file must be at most this much older than the start request (clock granularity)."""


@dataclass(frozen=True)
class _Reply:
    status: int
    reason: str
    body: str


class _RequestFailed(Exception):
    """No HTTP answer. `delivered`: the request may have reached the server."""

    def __init__(self, message: str, *, delivered: bool, timed_out: bool = False) -> None:
        super().__init__(message)
        self.delivered = delivered
        self.timed_out = timed_out


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: object,
        code: int,
        msg: str,
        headers: object,
        newurl: str,
    ) -> None:
        return None  # the 3xx surfaces as an HTTPError: a redirect would carry the token along


def _excerpt(raw: bytes, limit: int = 200) -> str:
    text = " ".join(raw.decode("utf-8", errors="replace").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe_oserror(err: BaseException) -> str:
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, socket.gaierror):
        return f"cannot resolve host ({err.strerror or err})"
    if isinstance(err, TimeoutError):
        return "timed out"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror.lower()
    return str(err) or type(err).__name__


_NOT_DELIVERED_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ENETUNREACH,
    errno.EHOSTUNREACH,
    errno.EADDRNOTAVAIL,
    errno.ENOENT,
}


class _ProfilingServerSource:
    """Shared machinery of `VllmSource` and `SglangSource` (see the module docstring)."""

    kind = "server"
    server = "server"

    def __init__(
        self,
        url: str,
        trace_dir: str | os.PathLike[str],
        *,
        name: str | None = None,
        delete_processed: bool = False,
        token_env: str = DEFAULT_TOKEN_ENV,
        request_timeout_s: float = 10.0,
        flush_timeout_s: float = 60.0,
        max_retries: int = 2,
        retry_pause_s: float = 1.0,
        backoff_s: float = 60.0,
        max_backoff_s: float = 3600.0,
        poll_interval_s: float = 0.5,
        expected_files: int | None = None,
    ) -> None:
        url = url.strip()
        if not re.match(r"^https?://[^/\s]+", url):
            raise ConfigError(f"{self.kind} source: url must start with http:// or https://, got {url!r}")
        for setting, value in (
            ("request_timeout_s", request_timeout_s),
            ("flush_timeout_s", flush_timeout_s),
            ("backoff_s", backoff_s),
            ("max_backoff_s", max_backoff_s),
            ("poll_interval_s", poll_interval_s),
        ):
            if not value > 0:
                raise ConfigError(f"{self.kind} source: {setting} must be > 0, got {value!r}")
        if max_retries < 0 or retry_pause_s < 0:
            raise ConfigError(f"{self.kind} source: max_retries and retry_pause_s must be >= 0")
        if expected_files is not None and expected_files < 1:
            raise ConfigError(f"{self.kind} source: expected_files must be >= 1, got {expected_files!r}")
        if not token_env:
            raise ConfigError(f"{self.kind} source: token_env must name an environment variable")
        self.url = url.rstrip("/")
        self.name = name or f"{self.kind}:{self.url}"
        self.trace_dir = Path(trace_dir)
        self.delete_processed = delete_processed
        self.token_env = token_env
        self.request_timeout_s = float(request_timeout_s)
        self.flush_timeout_s = float(flush_timeout_s)
        self.max_retries = int(max_retries)
        self.retry_pause_s = float(retry_pause_s)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.poll_interval_s = float(poll_interval_s)
        self.expected_files = expected_files

        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
        self._closed = threading.Event()
        self._failures = 0
        self._skip_until = 0.0
        self._disabled_logged = False
        self._unhealthy = False
        self._maybe_active = False
        """A start succeeded and its stop may not have: end that session before the next one."""

    # -- what differs per server ---------------------------------------------------------

    def _start_body(self) -> bytes | None:
        return None

    def _is_trace_name(self, name: str) -> bool:
        raise NotImplementedError

    def _labels_for(self, name: str) -> dict[str, str]:
        raise NotImplementedError

    def _enable_hint(self) -> str:
        raise NotImplementedError

    # -- Source protocol -----------------------------------------------------------------

    def start(self) -> None:
        if self.trace_dir.exists() and not self.trace_dir.is_dir():
            raise CaptureError(f"{self.name}: trace folder {self.trace_dir} is not a folder")
        if not self.trace_dir.exists():
            log.warning(
                "%s: trace folder %s does not exist (yet); the server creates it when it writes "
                "its first trace, and the agent must see the same folder",
                self.name,
                self.trace_dir,
            )
        elif not os.access(self.trace_dir, os.R_OK | os.X_OK):
            raise CaptureError(f"{self.name}: trace folder {self.trace_dir} is not readable")

    def close(self) -> None:
        self._closed.set()

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        if self._closed.is_set():
            return []
        now = time.monotonic()
        if now < self._skip_until:
            log.debug("%s: backing off, next try in %.0f s", self.name, self._skip_until - now)
            return []
        if self._maybe_active:
            self._end_leftover_session()

        before = self._list_traces()
        start_wall = time.time()
        try:
            reply = self._post("/start_profile", self._start_body(), self.request_timeout_s)
        except _RequestFailed as exc:
            if exc.delivered:
                self._maybe_active = True
            what = "the server did not answer" if exc.delivered else "cannot reach the server"
            return [self._fail_and_back_off(f"{what}: POST /start_profile: {exc}")]
        if error := self._reply_error(reply):
            return [self._start_refused(reply, error)]
        self._maybe_active = True
        started_us = time.time() * 1e6

        interrupted = self._closed.wait(max(0.0, window_s))
        stop_us = time.time() * 1e6
        if interrupted:
            self._stop_quietly()
            return []

        budget = self.flush_timeout_s if timeout_s <= 0 else min(self.flush_timeout_s, timeout_s)
        deadline = time.monotonic() + budget
        stop_error = self._stop(budget)
        if stop_error is not None:
            return [stop_error]
        requested = (started_us, stop_us)
        windows = self._collect(before, start_wall, deadline, budget, requested)
        if self._unhealthy:
            log.info("%s: profiling endpoints answer again", self.name)
        self._failures = 0
        self._skip_until = 0.0
        self._unhealthy = False
        return windows

    @property
    def capture_overhead_s(self) -> float:
        """How long `capture` may take beyond window + timeout (the service bounds rounds with it):
        the start request with all its retries and their doubling pauses."""
        attempts = self.max_retries + 1
        return float(attempts * self.request_timeout_s + self.retry_pause_s * (2**self.max_retries - 1))

    # -- HTTP ----------------------------------------------------------------------------

    def _post(self, path: str, body: bytes | None, timeout: float) -> _Reply:
        """POST with retries for attempts that never reached the server."""
        attempt = 0
        while True:
            try:
                return self._post_once(path, body, timeout)
            except _RequestFailed as exc:
                if exc.delivered or attempt >= self.max_retries or self._closed.is_set():
                    if attempt:
                        raise _RequestFailed(
                            f"{exc} (after {attempt + 1} attempts)",
                            delivered=exc.delivered,
                            timed_out=exc.timed_out,
                        ) from None
                    raise
                pause = self.retry_pause_s * (2**attempt)
                log.debug("%s: POST %s: %s; retrying in %.2f s", self.name, path, exc, pause)
                attempt += 1
                if self._closed.wait(pause):
                    raise

    def _post_once(self, path: str, body: bytes | None, timeout: float) -> _Reply:
        req = urllib.request.Request(self.url + path, data=body if body is not None else b"", method="POST")
        if body is not None:
            req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json, text/plain, */*")
        token = os.environ.get(self.token_env, "").strip()
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                return _Reply(resp.status, str(resp.reason), _excerpt(resp.read(4096)))
        except urllib.error.HTTPError as err:
            try:
                raw = err.read(4096)
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                err.close()
            return _Reply(err.code, str(err.reason), _excerpt(raw))
        except urllib.error.URLError as err:
            # Raised while connecting or sending the request (urllib wraps only that step):
            # refused, unreachable or a connect time-out mean the server never saw it.
            reason = err.reason
            delivered = not (
                isinstance(reason, (ConnectionRefusedError, socket.gaierror, TimeoutError))
                or (isinstance(reason, OSError) and reason.errno in _NOT_DELIVERED_ERRNOS)
            )
            what = _describe_oserror(reason) if isinstance(reason, BaseException) else str(reason)
            raise _RequestFailed(what, delivered=delivered) from None
        except TimeoutError:
            raise _RequestFailed(f"no answer within {timeout:g} s", delivered=True, timed_out=True) from None
        except (http.client.RemoteDisconnected, ConnectionError) as err:
            raise _RequestFailed(
                f"connection closed by the server ({_describe_oserror(err)})", delivered=True
            ) from None
        except (OSError, http.client.HTTPException) as err:
            raise _RequestFailed(_describe_oserror(err), delivered=True) from None

    @staticmethod
    def _reply_error(reply: _Reply) -> str | None:
        """None for a success; else what the answer says went wrong."""
        if not 200 <= reply.status < 300:
            detail = f": {reply.body}" if reply.body else ""
            return f"HTTP {reply.status} {reply.reason}{detail}"
        try:
            doc = json.loads(reply.body) if reply.body.startswith("{") else None
        except ValueError:
            doc = None
        if isinstance(doc, dict) and (doc.get("success") is False or doc.get("error")):
            return f"HTTP {reply.status} with an error body: {reply.body}"
        return None

    # -- start / stop outcomes -----------------------------------------------------------

    def _start_refused(self, reply: _Reply, error: str) -> CapturedWindow:
        if reply.status in (404, 405, 501):
            message = (
                f"profiling is disabled on the server (POST /start_profile -> {error}). {self._enable_hint()}"
            )
            return self._fail_and_back_off(message, disabled=True)
        if reply.status in (401, 403):
            has = "is set" if os.environ.get(self.token_env, "").strip() else "is not set"
            message = (
                "the server refused the request "
                f"(POST /start_profile -> HTTP {reply.status} {reply.reason}); "
                f"a bearer token is read from the environment variable {self.token_env}, which {has}"
            )
            return self._fail_and_back_off(message)
        return self._fail_and_back_off(f"POST /start_profile -> {error}")

    def _stop(self, budget: float) -> CapturedWindow | None:
        """Send stop_profile; a failed window when the window is lost, else None."""
        try:
            reply = self._post("/stop_profile", self._stop_body(), budget)
        except _RequestFailed as exc:
            if exc.timed_out:
                # Still flushing: the files may yet appear; collect what is there.
                log.info("%s: POST /stop_profile: %s (server still writing traces)", self.name, exc)
                return None
            return self._fail_and_back_off(f"server went away mid-window: POST /stop_profile: {exc}")
        self._maybe_active = False
        if error := self._reply_error(reply):
            return self._fail_and_back_off(f"POST /stop_profile -> {error}")
        return None

    def _stop_body(self) -> bytes | None:
        return None

    def _stop_quietly(self) -> None:
        try:
            self._post_once("/stop_profile", self._stop_body(), self.request_timeout_s)
            self._maybe_active = False
        except _RequestFailed as exc:
            log.warning("%s: POST /stop_profile at shutdown: %s", self.name, exc)

    def _end_leftover_session(self) -> None:
        log.info("%s: sending POST /stop_profile to end a session an earlier window left open", self.name)
        try:
            self._post_once("/stop_profile", self._stop_body(), self.request_timeout_s)
        except _RequestFailed as exc:
            log.debug("%s: leftover stop_profile: %s", self.name, exc)
        self._maybe_active = False

    def _fail_and_back_off(self, message: str, *, disabled: bool = False) -> CapturedWindow:
        delay = min(self.max_backoff_s, self.backoff_s * (2**self._failures))
        self._failures = min(self._failures + 1, 60)
        self._skip_until = time.monotonic() + delay
        self._unhealthy = True
        if disabled:
            if not self._disabled_logged:
                log.warning("%s: %s Skipping windows; next try in %.0f s.", self.name, message, delay)
                self._disabled_logged = True
            else:
                log.debug("%s: still disabled; next try in %.0f s", self.name, delay)
        else:
            log.warning("%s: %s; next try in %.0f s", self.name, message, delay)
        return CapturedWindow(source=self.name, path=None, error=message, outcome="failed")

    # -- files ---------------------------------------------------------------------------

    def _list_traces(self) -> dict[str, Path]:
        try:
            with os.scandir(self.trace_dir) as entries:
                return {
                    e.name: Path(e.path)
                    for e in entries
                    if self._is_trace_name(e.name) and not e.name.endswith(TEMP_SUFFIXES) and e.is_file()
                }
        except OSError:
            return {}

    def _collect(
        self,
        before: dict[str, Path],
        start_wall: float,
        deadline: float,
        budget: float,
        requested: tuple[float, float],
    ) -> list[CapturedWindow]:
        tracker = SettleTracker()
        settled: dict[str, Path] = {}
        pending: dict[str, Path] = {}
        quiet_polls = 0
        while True:
            new: dict[str, Path] = {}
            for name, path in self._list_traces().items():
                if name in before:
                    continue
                try:
                    if path.stat().st_mtime < start_wall - _MTIME_SLACK_S:
                        continue
                except OSError:
                    continue
                new[name] = path
            grew = len(new) > len(settled) + len(pending)
            pending = {}
            for name, path in new.items():
                if name in settled or tracker.observe(path):
                    settled[name] = path
                else:
                    pending[name] = path
            quiet_polls = 0 if grew else quiet_polls + 1
            if settled and not pending:
                if self.expected_files is not None:
                    if len(settled) >= self.expected_files:
                        break
                elif quiet_polls >= 1:
                    break
            if time.monotonic() >= deadline:
                break
            if self._closed.wait(self.poll_interval_s):
                return []
        return self._windows(settled, pending, tracker, budget, requested)

    def _windows(
        self,
        settled: dict[str, Path],
        pending: dict[str, Path],
        tracker: SettleTracker,
        budget: float,
        requested: tuple[float, float],
    ) -> list[CapturedWindow]:
        out: list[CapturedWindow] = []
        for name in sorted(settled):
            path = settled[name]
            out.append(
                CapturedWindow(
                    source=self.name,
                    path=path,
                    labels=self._labels_for(name),
                    requested=requested,
                    on_done=self._on_done(path),
                )
            )
        for name in sorted(pending):
            size = tracker.size(pending[name])
            error = (
                f"trace file {name} still incomplete ({size if size is not None else '?'} bytes, "
                f"not a complete gzip/JSON file) {budget:g} s after stop_profile; "
                "raise flush_timeout_s (and the service's time-out) if flushing is this slow"
            )
            out.append(self._timed_out(error, self._labels_for(name), requested))
        found = len(settled) + len(pending)
        if self.expected_files is not None and found < self.expected_files:
            have = [self._labels_for(n).get("rank") for n in (*settled, *pending)]
            ranks = [r for r in have if r is not None]
            if len(ranks) == found and all(r.isdigit() for r in ranks):
                missing = sorted(set(range(self.expected_files)) - {int(r) for r in ranks})
                missing = missing[: self.expected_files - found]
                for rank in missing:
                    out.append(
                        self._timed_out(
                            f"no trace file for rank {rank} in {self.trace_dir} "
                            f"{budget:g} s after stop_profile "
                            f"(expected {self.expected_files} files, found {found})",
                            {"rank": str(rank)},
                            requested,
                        )
                    )
            else:
                for _ in range(self.expected_files - found):
                    out.append(
                        self._timed_out(
                            f"expected {self.expected_files} trace files in {self.trace_dir}, found {found} "
                            f"{budget:g} s after stop_profile",
                            {},
                            requested,
                        )
                    )
        elif found == 0:
            out.append(
                self._timed_out(
                    f"no new trace file in {self.trace_dir} {budget:g} s after stop_profile; check that this "
                    f"is the server's trace folder as the agent sees it. {self._enable_hint()}",
                    {},
                    requested,
                )
            )
        for w in out:
            if w.outcome == "timed_out":
                log.warning("%s: %s", self.name, w.error)
        log.debug("%s: window gave %d trace file(s)", self.name, len(settled))
        return out

    def _timed_out(
        self, error: str, labels: dict[str, str], requested: tuple[float, float]
    ) -> CapturedWindow:
        outcome: Outcome = "timed_out"
        return CapturedWindow(
            source=self.name, path=None, labels=labels, requested=requested, error=error, outcome=outcome
        )

    def _on_done(self, path: Path) -> _DeleteWhenProcessed | None:
        return _DeleteWhenProcessed(self.name, path) if self.delete_processed else None


class _DeleteWhenProcessed:
    def __init__(self, source: str, path: Path) -> None:
        self.source = source
        self.path = path

    def __call__(self, processed: bool) -> None:
        if not processed:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning(
                "%s: cannot delete processed trace %s: %s", self.source, self.path, exc.strerror or exc
            )


_VLLM_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json")
_VLLM_WORKER = re.compile(r"^(?P<worker>.+?)\.(?P<ts>\d+)$")
_VLLM_RANK = re.compile(r"-rank-(?P<rank>\d+)$")


class VllmSource(_ProfilingServerSource):
    """Windows from a vLLM server's `POST /start_profile` and `POST /stop_profile`.

    `trace_dir` is the server's profiler folder as the agent sees it (`torch_profiler_dir` of
    `--profiler-config`, or `VLLM_TORCH_PROFILER_DIR` before v0.13). Labels: `{"rank": N}` from
    `{instance_id}-rank-{N}` worker names, else `{"process": worker}` (`{host}_{pid}`; the time
    stamp is left out so that the label's values stay bounded). See the module docstring for
    the behaviour followed and for the other parameters.
    """

    kind = "vllm"
    server = "vLLM"

    def _is_trace_name(self, name: str) -> bool:
        return name.endswith(_VLLM_SUFFIXES)

    def _labels_for(self, name: str) -> dict[str, str]:
        stem = next((name[: -len(s)] for s in _VLLM_SUFFIXES if name.endswith(s)), name)
        m = _VLLM_WORKER.match(stem)
        worker = m.group("worker") if m else stem
        r = _VLLM_RANK.search(worker)
        return {"rank": r.group("rank")} if r else {"process": worker}

    def _enable_hint(self) -> str:
        return (
            "Start vLLM (v0.13+) with --profiler-config "
            f'\'{{"profiler": "torch", "torch_profiler_dir": "{self.trace_dir}"}}\', '
            f"or older vLLM with VLLM_TORCH_PROFILER_DIR={self.trace_dir}."
        )


_SGLANG_SUFFIX = ".trace.json.gz"
_SGLANG_PART = re.compile(r"-(?P<kind>TP|DP|PP|EP)-(?P<rank>\d+)(?=-|$)")


class SglangSource(_ProfilingServerSource):
    """Windows from an SGLang server's `POST /start_profile` (JSON body) and `POST /stop_profile`.

    `trace_dir` is the folder as the agent sees it; `server_trace_dir` is the same folder as the
    server sees it, sent as `output_dir` (default: `trace_dir`). `activities` are SGLang's
    names ("CPU", "GPU"). Labels: `{"rank": TP rank}` plus `dp_rank`/`pp_rank`/`ep_rank` when the
    file name has them, else `{"process": file stem}`. See the module docstring for the
    behaviour followed (SGLang v0.5) and for the other parameters.
    """

    kind = "sglang"
    server = "SGLang"

    def __init__(
        self,
        url: str,
        trace_dir: str | os.PathLike[str],
        *,
        server_trace_dir: str | None = None,
        activities: Sequence[str] = ("GPU",),
        with_stack: bool = False,
        record_shapes: bool = False,
        name: str | None = None,
        delete_processed: bool = False,
        token_env: str = DEFAULT_TOKEN_ENV,
        request_timeout_s: float = 10.0,
        flush_timeout_s: float = 60.0,
        max_retries: int = 2,
        retry_pause_s: float = 1.0,
        backoff_s: float = 60.0,
        max_backoff_s: float = 3600.0,
        poll_interval_s: float = 0.5,
        expected_files: int | None = None,
    ) -> None:
        super().__init__(
            url,
            trace_dir,
            name=name,
            delete_processed=delete_processed,
            token_env=token_env,
            request_timeout_s=request_timeout_s,
            flush_timeout_s=flush_timeout_s,
            max_retries=max_retries,
            retry_pause_s=retry_pause_s,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            poll_interval_s=poll_interval_s,
            expected_files=expected_files,
        )
        acts = [a.upper() for a in activities]
        if not acts or any(a not in ("CPU", "GPU") for a in acts):
            raise ConfigError(f"sglang source: activities must be among CPU, GPU; got {list(activities)!r}")
        if "GPU" not in acts:
            raise ConfigError("sglang source: activities must include GPU (kernels are what warpwatch reads)")
        self.server_trace_dir = server_trace_dir or str(self.trace_dir)
        self.activities = acts
        self.with_stack = with_stack
        self.record_shapes = record_shapes

    def _start_body(self) -> bytes | None:
        return json.dumps(
            {
                "output_dir": self.server_trace_dir,
                "activities": self.activities,
                "with_stack": self.with_stack,
                "record_shapes": self.record_shapes,
            }
        ).encode()

    def _is_trace_name(self, name: str) -> bool:
        return name.endswith(_SGLANG_SUFFIX) and not name.startswith("merged-")

    def _labels_for(self, name: str) -> dict[str, str]:
        stem = name[: -len(_SGLANG_SUFFIX)] if name.endswith(_SGLANG_SUFFIX) else name
        parts = {m.group("kind"): m.group("rank") for m in _SGLANG_PART.finditer(stem)}
        if "TP" not in parts:
            return {"process": stem}
        labels = {"rank": parts["TP"]}
        for kind in ("DP", "PP", "EP"):
            if kind in parts:
                labels[f"{kind.lower()}_rank"] = parts[kind]
        return labels

    def _enable_hint(self) -> str:
        return (
            "SGLang (v0.4+) serves POST /start_profile without any flag: point the source at the "
            "server itself, not at a router or gateway that does not forward it; traces go to the "
            f"request's output_dir ({self.server_trace_dir}), else the server's SGLANG_TORCH_PROFILER_DIR, "
            "else /tmp."
        )
