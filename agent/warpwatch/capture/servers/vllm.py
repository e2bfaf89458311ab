"""vLLM's profiler endpoints as a source of windows (`--source vllm:URL,dir=PATH`).

Versions followed (upstream files read for each; see tests/support/engines/vllm_server.py, which
replays them):

- before v0.13: `vllm/entrypoints/openai/api_server.py` registers `POST /start_profile` and
  `/stop_profile` only when `VLLM_TORCH_PROFILER_DIR` is set; v0.13-v0.16:
  `vllm/entrypoints/serve/profile/api_router.py`, enabled by `--profiler-config
  '{"profiler": "torch", "torch_profiler_dir": DIR}'`. Without either, FastAPI's 404. Both
  routes take no body and answer 200 with an empty body once every worker has written its
  trace. Workers write `tensorboard_trace_handler` files `{worker}.{time_ns}.pt.trace.json.gz`
  (`.pt.trace.json` when `torch_profiler_use_gzip` is off), `worker` being
  `{instance_id}-rank-{rank}` (V1 workers) or the handler's default `{host}_{pid}` (V0).
- v0.17+: `worker` is `[{prefix}_]dp{d}_pp{p}_tp{t}_dcp{c}_ep{e}_rank{r}`
  (`vllm/distributed/utils.py: get_worker_rank_suffix`; `rank{r}` alone before the parallel
  state exists).
- AsyncLLM (the API-server process, V1 engine) profiles itself as well, CPU only:
  `{host}_{pid}.async_llm.{time_ns}.pt.trace.json.gz` (`vllm/v1/engine/async_llm.py`). It has no
  GPU kernels: not a window (counted `cpu_only`), deleted with the rest.
- v0.32 (`vllm/entrypoints/serve/profile/api_router.py`, `vllm/profiler/wrapper.py`): the start
  takes an optional JSON body (`profile_prefix`, `delay_iterations`, `max_iterations`; unknown keys
  ignored). With `max_iterations` a worker stops its profiler by itself after that many engine
  steps, so the trace holds N steps of activity however busy the server is, and the stop sent at
  the window's end finds the workers done and answers at once. Without it a stop makes every
  worker write its whole window's trace and build a `key_averages()` table before serving again
  (measured: 18-24 s for 1 s of the CPU build, 66 s with stacks). The agent sends
  `{"max_iterations": max_steps}` (`max_steps`, default `DEFAULT_MAX_STEPS`; 0 leaves it out); a
  version without the field ignores the body, and the window is the wall-clock one. The start
  also names the session (`profile_prefix`: `warpwatch-{run}`, so files are
  `warpwatch-{run}_{worker}.{time_ns}…`): an earlier run's files, written after it exited, are
  claimed by the next (`leftovers`); the prefix is left out of the labels.
- v0.32 (run for real in tests/capture/test_vllm_real.py, CPU build): a start while a profile runs answers
  409 (`AsyncLLM`'s session guard): someone else's profile, left alone (`profile_in_use`). Profiler
  requests wait one behind the other (`_profile_lock`): a start sent while a stop flushes begins
  after it (`stops`). A CPU worker names its file `rank{r}` alone.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from ...errors import ConfigError
from .. import CapturedWindow
from .backoff import Backoff
from .client import Reply, ServerClient
from .dialect import Dialect
from .leftovers import strip_prefix
from .options import ServerOptions
from .profilerextras import recorded_extras
from .session import Session

__all__ = ["DEFAULT_MAX_STEPS", "VllmDialect"]

log = logging.getLogger("warpwatch.capture.servers")

_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json")
_WORKER = re.compile(r"^(?P<worker>.+?)\.(?P<ts>\d+)$")
_V1_RANK = re.compile(r"-rank-(?P<rank>\d+)$")
_V17_RANKS = re.compile(
    r"(?:^|_)dp(?P<dp>\d+)_pp(?P<pp>\d+)_tp(?P<tp>\d+)_dcp(?P<dcp>\d+)_ep(?P<ep>\d+)(?:_rank(?P<rank>\d+))?$"
)
_BARE_RANK = re.compile(r"(?:^|_)rank(?P<rank>\d+)$")
_FRONT_END = ".async_llm"
DEFAULT_MAX_STEPS = 16
"""Engine steps a worker records per window before it stops by itself (`max_iterations`): about
0.2-1 s of decoding on a GPU, a trace of a few MB at most."""
MAX_STEPS_LIMIT = 100_000
INSPECTED_WINDOWS = 3
"""Traces looked at for what the server's profiler records beyond kernels (`profilerextras`)."""


def _worker(name: str) -> str:
    stem = next((name[: -len(s)] for s in _SUFFIXES if name.endswith(s)), name)
    m = _WORKER.match(stem)
    return m.group("worker") if m else stem


class VllmDialect(Dialect):
    """vLLM's requests (the start's `max_iterations`, a 409 for a profile already running) and
    trace names. Every start is safe and its stop answers once the workers have written their traces.

    Labels: `{"rank": N}` from `{instance_id}-rank-{N}` worker names; from v0.17 names also
    `dp_rank`, `pp_rank`, `tp_rank`, `dcp_rank`, `ep_rank`; else `{"process": worker}`
    (`{host}_{pid}`; the time stamp is left out so that the label's values stay bounded).
    `trace_dir` is the server's profiler folder as the agent sees it (`torch_profiler_dir` of
    `--profiler-config`, or `VLLM_TORCH_PROFILER_DIR` before v0.13), named in `enable_hint`;
    `max_steps`: engine steps a worker records per window (`max_iterations`; 0: the whole window).
    """

    kind = "vllm"
    inter_token_histograms = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
    first_token_histograms = ("vllm:time_to_first_token_seconds",)
    generated_counters = ("vllm:generation_tokens_total",)
    requests_before_start = 0
    names_sessions = True

    def __init__(self, trace_dir: str | os.PathLike[str], max_steps: int = DEFAULT_MAX_STEPS) -> None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or not 0 <= max_steps <= MAX_STEPS_LIMIT:
            raise ConfigError(
                f"vllm source: max_steps must be an integer from 0 to {MAX_STEPS_LIMIT} "
                f"(0: the whole window), got {max_steps!r}"
            )
        self.trace_dir = Path(trace_dir)
        self.max_steps = max_steps
        self._inspected = 0
        self._front_end_warned = False

    def inspect_windows(
        self, source: str, trace_dir: Path, windows: list[CapturedWindow], files: Mapping[str, int]
    ) -> None:
        """Warn once, loudly, when the server's profiler records stacks, memory or shapes, and
        when its API server profiles itself."""
        if files.get("cpu_only") and not self._front_end_warned:
            self._front_end_warned = True
            log.warning(
                "%s: vLLM's API server profiles itself during each window (its CPU-only *.async_llm.* trace): "
                "at each stop it exports that trace and builds a table in the process that streams tokens to "
                "clients, a stall the engine's inter-token latency histogram does not show (so the agent "
                'underestimates its cost). Add "ignore_frontend": true to vLLM\'s --profiler-config '
                "(docs/overhead.md)",
                source,
            )
        for w in windows:
            if w.path is None or self._inspected >= INSPECTED_WINDOWS:
                continue
            self._inspected += 1
            if extras := recorded_extras(w.path):
                self._inspected = INSPECTED_WINDOWS
                log.warning(
                    "%s: the server's profiler records %s: each window costs the server far more than its "
                    "kernels (a stop took 66 s with stacks on the CPU build). Start vLLM with --profiler-config "
                    '\'{"profiler": "torch", "torch_profiler_dir": "%s", %s, '
                    '"ignore_frontend": true}\' (docs/overhead.md)',
                    source,
                    ", ".join(extras),
                    trace_dir,
                    ", ".join(f'"{e}": false' for e in extras),
                )

    def before_start(self, client: ServerClient, options: ServerOptions, backoff: Backoff) -> CapturedWindow | None:
        return None  # every version takes the start the agent sends

    def start_body(self, prefix: str | None) -> bytes | None:
        body: dict[str, object] = {"max_iterations": self.max_steps} if self.max_steps else {}
        if prefix is not None:
            body["profile_prefix"] = prefix
        return json.dumps(body).encode() if body else None

    def is_trace_name(self, name: str) -> bool:
        return name.endswith(_SUFFIXES)

    def is_worker_trace(self, name: str) -> bool:
        return not _worker(name).endswith(_FRONT_END)

    def stop_waits_for_files(self) -> bool:
        return True

    def expected(self, expected_files: int | None) -> int | None:
        return expected_files  # the server does not report its workers

    def step_bounded(self) -> bool:
        return False  # `max_iterations` ends the recording, not the session: a stop is still sent

    def session_filter(self) -> Callable[[str], bool] | None:
        return None

    def labels_for(self, name: str) -> dict[str, str]:
        worker = strip_prefix(_worker(name))
        if m := _V17_RANKS.search(worker):
            labels = {f"{k}_rank": v for k, v in m.groupdict().items() if k != "rank" and v is not None}
            if m.group("rank") is not None:
                labels["rank"] = m.group("rank")
            return labels
        r = _V1_RANK.search(worker) or _BARE_RANK.search(worker)
        return {"rank": r.group("rank")} if r else {"process": worker}

    def refusal_reason(self, reply: Reply) -> str | None:
        return "profile_in_use" if reply.status == 409 else None

    def late_filter(self, session: Session) -> Callable[[str], bool] | None:
        # vLLM's names carry no session id, but each worker writes one file per session: once
        # a worker's file is handed over, a later file of that worker is another session's (a
        # person's profile in the same folder), not to be read or deleted here.
        base = session.accept

        def worker_still_due(name: str) -> bool:
            return _worker(name) not in {_worker(n) for n in session.handed} and (base is None or base(name))

        return worker_still_due

    def enable_hint(self) -> str:
        return (
            "Start vLLM (v0.13+) with --profiler-config "
            f'\'{{"profiler": "torch", "torch_profiler_dir": "{self.trace_dir}"}}\', '
            f"or older vLLM with VLLM_TORCH_PROFILER_DIR={self.trace_dir}."
        )
