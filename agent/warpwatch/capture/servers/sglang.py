"""SGLang's profiler endpoints as a source of windows (`--source sglang:URL,dir=PATH`).

What a `POST /start_profile` does depends on the version, and some requests stop the server
(its scheduler raises, and SGLang ends every process when a scheduler dies). So each window
first reads the version (`GET /get_server_info`, `"version"`; `/server_info` where the old path
is gone) and sends only what that version takes safely. Upstream code read for each family
(replayed by tests/support/engines/sglang_server.py):

- before 0.4.4 (`srt/managers/scheduler.py`: `start_profile` raises "Profiler is not enabled."
  unless the server's environment has `SGLANG_TORCH_PROFILER_DIR`; the tokenizer manager sends
  the request on without waiting, so the route answers 200 first and the server dies after):
  the agent cannot see the server's environment, so it sends nothing unless the source says
  the variable is set (`profiler_dir_env=True`; `trace_dir` is then that folder). The routes
  take no body, and `/stop_profile` answers before the ranks have written
  `{time.time()}-TP-{rank}.trace.json.gz`: the window waits for the ranks the server reports.
- 0.4.4 to 0.4.6 (`ProfileReqInput`: `output_dir`, `num_steps`, `activities`, ...; the
  tokenizer manager waits for the scheduler's answer): a wall-clock window, start then stop.
  A start while a profile runs is refused ("Profiling is already in progress"): HTTP 500,
  counted `profile_in_use`.
- 0.4.7 and later (`srt/managers/scheduler_profiler_mixin.py`): a plain start no longer
  checks for a running profile, it replaces it and answers 200; only the `profile_by_stage` /
  `start_step` path checks. And with `SGLANG_PROFILE_V2=1` (`srt/utils/profile_utils.py`,
  `ProfileManager`), which no endpoint reports, anything but `profile_by_stage: true` with
  `num_steps` and without `start_step`, `merge_profiles` or `/stop_profile` fails an assertion
  in the scheduler. So from 0.4.7 on the agent sends `profile_by_stage: true, num_steps: N`
  only, the one request both profilers take safely, and never `/stop_profile`: the server
  records N prefill and N decode steps when traffic comes and stops by itself, writing
  `[{prefix}-]{id}-TP-{tp}[-DP-{dp}][-PP-{pp}][-EP-{ep}]-{stage}.trace.json.gz`. A profile
  already running refuses it (500, `profile_in_use`). Until every file of that session is
  there, no other start is sent (`session_pending`): a second configure while a v2 stage
  records fails the same way.

Versions the agent cannot read, or cannot profile safely, are refused: a failed window with the
reason, counted `unsafe_request`, backed off.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ...errors import ConfigError
from .. import CapturedWindow
from .backoff import Backoff
from .client import Reply, RequestFailed, ServerClient, reply_error
from .dialect import Dialect
from .options import ServerOptions
from .session import Session

__all__ = ["DEFAULT_NUM_STEPS", "SglangDialect"]

_SUFFIX = ".trace.json.gz"
_NAME = re.compile(
    r"^(?:(?P<prefix>.+)-)?(?P<id>\d+(?:\.\d+)?)-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?"
    r"(?:-EP-(?P<ep>\d+))?(?:-(?P<stage>[^-]+?))?\.trace\.json\.gz$"
)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")
_CHECKED_START = (0, 4, 4)
"""First version whose start waits for the scheduler's answer (and needs no environment)."""
_STAGE_ONLY = (0, 4, 7)
"""First version whose plain start replaces a running profile (and that has profile v2)."""
DEFAULT_NUM_STEPS = 10
"""Forward steps per stage of a by-stage profile: a few decode iterations, a small trace."""
_STAGES = 2
"""A by-stage session writes one file per rank for prefill and one for decode."""


def parse_version(value: object) -> tuple[int, int, int] | None:
    """(major, minor, patch) of "0.4.6.post1" and the like; None for anything else."""
    if not isinstance(value, str) or not (m := _VERSION.match(value.strip())):
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


MAX_RANKS = 1024
"""More trace-writing ranks than this in a server's answer is not believed (the count sizes the
windows reported missing)."""


class SglangDialect(Dialect):
    """SGLang's requests, which depend on the version read before each start (`before_start`),
    and its trace names.

    `server_trace_dir` is the trace folder as the server sees it, sent as `output_dir`.
    `activities` are SGLang's names ("CPU", "GPU"). `profiler_dir_env`: the server's environment
    has `SGLANG_TORCH_PROFILER_DIR` (needed before 0.4.4, see the module doc). `num_steps`: steps
    per stage of a by-stage session (0.4.7+). Labels: `{"rank": TP rank}` plus
    `dp_rank`/`pp_rank`/`ep_rank` when the file name has them, else `{"process": file stem}`.
    """

    kind = "sglang"
    inter_token_histograms = ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")
    first_token_histograms = ("sglang:time_to_first_token_seconds",)
    generated_counters = ("sglang:generation_tokens_total",)
    requests_before_start = 2  # GET /get_server_info, then /server_info where that is gone
    names_sessions = False  # its profile_id names a session, but not as a prefix of our choosing

    def __init__(
        self,
        server_trace_dir: str,
        activities: Sequence[str] = ("GPU",),
        with_stack: bool = False,
        record_shapes: bool = False,
        profiler_dir_env: bool = False,
        num_steps: int = DEFAULT_NUM_STEPS,
    ) -> None:
        acts = [a.upper() for a in activities]
        if not acts or any(a not in ("CPU", "GPU") for a in acts):
            raise ConfigError(f"sglang source: activities must be among CPU, GPU; got {list(activities)!r}")
        if "GPU" not in acts:
            raise ConfigError("sglang source: activities must include GPU (kernels are what warpwatch reads)")
        if not 1 <= num_steps <= 10_000:
            raise ConfigError(f"sglang source: num_steps must be between 1 and 10000, got {num_steps!r}")
        self.server_trace_dir = server_trace_dir
        self.activities = acts
        self.with_stack = with_stack
        self.record_shapes = record_shapes
        self.profiler_dir_env = profiler_dir_env
        self.num_steps = int(num_steps)
        self.version: tuple[int, int, int] | None = None
        """The server's version as last read."""
        self._rank_count: int | None = None

    @staticmethod
    def is_staged(name: str) -> bool:
        """A by-stage session's file: its name ends in a stage (a plain profile's files are not ours)."""
        m = _NAME.match(name)
        return m is not None and m.group("stage") is not None

    @staticmethod
    def ranks(info: dict[str, object]) -> int | None:
        """Processes that write a trace, from the server's arguments (tp x pp, x dp without DP
        attention); None when the answer does not say, or says something unbelievable."""

        def size(key: str) -> int | None:
            v = info.get(key, 1)
            return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_RANKS else None

        sizes = [size("tp_size"), size("pp_size")] + ([] if info.get("enable_dp_attention") else [size("dp_size")])
        if "tp_size" not in info or any(s is None for s in sizes):
            return None
        n = 1
        for s in sizes:
            n *= s or 1
        return n if n <= MAX_RANKS else None

    # -- the version and what it takes -----------------------------------------------------

    def _server_info(
        self, client: ServerClient, timeout_s: float, backoff: Backoff
    ) -> tuple[dict[str, object] | None, CapturedWindow | None]:
        missing: list[str] = []
        for path in ("/get_server_info", "/server_info"):
            try:
                reply = client.request("GET", path, None, timeout_s)
            except RequestFailed as exc:
                what = "the server did not answer" if exc.delivered else "cannot reach the server"
                return None, backoff.fail(f"{what}: GET {path}: {exc}")
            if reply.status in (404, 405):
                missing.append(f"GET {path} -> HTTP {reply.status}")
                continue
            if error := reply_error(reply):
                return None, backoff.fail(f"GET {path} -> {error}")
            doc = reply.json()
            if isinstance(doc, dict):
                return doc, None
            return None, backoff.refuse(
                "unsafe_request",
                f"GET {path} did not answer a JSON object ({reply.body}): "
                "cannot tell the SGLang version, so no profile is started",
            )
        return None, backoff.refuse(
            "unsafe_request",
            f"cannot tell the SGLang version ({'; '.join(missing)}), so no profile is started (a start "
            f"some versions do not take stops the server). {self.enable_hint()}",
        )

    def before_start(self, client: ServerClient, options: ServerOptions, backoff: Backoff) -> CapturedWindow | None:
        info, failed = self._server_info(client, options.request_timeout_s, backoff)
        if info is None:
            return failed
        self.version = parse_version(info.get("version"))
        self._rank_count = self.ranks(info)
        if self.version is None:
            return backoff.refuse(
                "unsafe_request",
                f"the server reports no SGLang version (version={info.get('version')!r}), so no profile is "
                "started: what a start request does, and whether it stops the server, depends on it",
            )
        if self.version < _CHECKED_START and not self.profiler_dir_env:
            v = ".".join(map(str, self.version))
            return backoff.refuse(
                "unsafe_request",
                f"SGLang {v} stops the whole server when /start_profile is called without "
                'SGLANG_TORCH_PROFILER_DIR in its environment ("Profiler is not enabled."), and the agent '
                "cannot see that environment: no profile is started. If the server has it, set "
                "profiler_dir_env=1 on this source (dir= being that folder as the agent sees it); or "
                "upgrade SGLang to 0.4.4 or later",
            )
        if self.step_bounded() and self.expected(options.expected_files) is None:
            return backoff.refuse(
                "unsafe_request",
                "the server reports no tp_size, so the end of a by-stage profile cannot be told, and a new "
                "start while one records stops a server with SGLANG_PROFILE_V2=1: no profile is started "
                "(set expected_files=N on this source: the number of ranks)",
            )
        return None

    def start_body(self, prefix: str | None) -> bytes | None:
        if self.version is not None and self.version < _CHECKED_START:
            return None  # these routes take no body; the traces go to SGLANG_TORCH_PROFILER_DIR
        body: dict[str, object] = {
            "output_dir": self.server_trace_dir,
            "activities": self.activities,
            "with_stack": self.with_stack,
            "record_shapes": self.record_shapes,
        }
        if self.step_bounded():
            body.update(profile_by_stage=True, num_steps=self.num_steps)
        return json.dumps(body).encode()

    def refusal_reason(self, reply: Reply) -> str | None:
        # From 0.4.4 a start while a profile runs is the scheduler's refusal, which the route
        # turns into a 500 (the tokenizer manager raises it); a 500 is what that looks like.
        if reply.status == 500 and self.version is not None and self.version >= _CHECKED_START:
            return "profile_in_use"
        return None

    def stop_waits_for_files(self) -> bool:
        return self.version is None or self.version >= _CHECKED_START

    def expected(self, expected_files: int | None) -> int | None:
        ranks = expected_files if expected_files is not None else self._rank_count
        if ranks is not None and self.step_bounded():
            return ranks * _STAGES  # one file per rank for each stage
        return ranks

    # -- 0.4.7+: step-bounded sessions -----------------------------------------------------

    def step_bounded(self) -> bool:
        return self.version is not None and self.version >= _STAGE_ONLY

    def session_filter(self) -> Callable[[str], bool]:
        return self.is_staged

    def late_filter(self, session: Session) -> Callable[[str], bool] | None:
        # From 0.4.4 every rank of one profile writes the same profile id (the tokenizer
        # manager's, sent with the request): once one file is known, later
        # files of the session are the ones with that id.
        ids = {m.group("id") for n in session.handed if (m := _NAME.match(n))}
        if not ids or (self.version is not None and self.version < _CHECKED_START):  # each rank its own time
            return session.accept
        base = session.accept

        def same_profile(name: str) -> bool:
            m = _NAME.match(name)
            return m is not None and m.group("id") in ids and (base is None or base(name))

        return same_profile

    # -- names -----------------------------------------------------------------------------

    def is_trace_name(self, name: str) -> bool:
        return name.endswith(_SUFFIX) and not name.startswith("merged-")

    def is_worker_trace(self, name: str) -> bool:
        return True  # every file it writes is a rank's (`merged-` ones are no trace here)

    def labels_for(self, name: str) -> dict[str, str]:
        m = _NAME.match(name)
        if m is None:
            return {"process": name[: -len(_SUFFIX)] if name.endswith(_SUFFIX) else name}
        labels = {"rank": m.group("tp")}
        for kind in ("dp", "pp", "ep"):
            if m.group(kind) is not None:
                labels[f"{kind}_rank"] = m.group(kind)
        return labels

    def enable_hint(self) -> str:
        return (
            "SGLang (v0.4+) serves GET /get_server_info and POST /start_profile without any flag: point the "
            "source at the server itself, not at a router or gateway that does not forward them; traces go "
            f"to the request's output_dir ({self.server_trace_dir}), else the server's "
            "SGLANG_TORCH_PROFILER_DIR, else /tmp."
        )

    def inspect_windows(
        self, source: str, trace_dir: Path, windows: list[CapturedWindow], files: Mapping[str, int]
    ) -> None:
        """Nothing to look at: the start request sets what the profiler records (stacks, shapes)."""
