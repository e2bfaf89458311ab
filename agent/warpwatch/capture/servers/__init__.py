"""Capture through vLLM's and SGLang's own profiling endpoints.

Both servers can start and stop `torch.profiler` in their workers on request and write one
Kineto trace per worker (tensor-parallel rank) into a folder the agent must see (a shared
volume; `trace_dir` is that folder as the agent sees it). The pieces:

- `base`: the one source (`ProfilingServerSource`): one window (start, wait, stop, collect)
  and counters (`stats`), from `options` (`ServerOptions`: the settings, checked once) and a
  `dialect` (what differs per server);
- `dialect`: the abstract `Dialect`, everything a server's module must state;
- `backoff`: the wait after a failed window and the windows skipped on purpose (`Backoff`);
- `session`: which files in the folder belong to one of warpwatch's sessions, when they
  are complete, and what happens to the ones that come after their window gave up;
- `client`: the HTTP client (retries only for requests that never reached the server,
  bearer token from the environment, no redirects, no proxy);
- `files` (`SessionFiles`) and `stops` (`StopTracker`): the session's files handed over as
  windows, and the stop awaited;
- `vllm` and `sglang`: each server's dialect (`VllmDialect`, `SglangDialect`: what its
  versions take and the names its files have); `capture.registry.vllm_source` and
  `sglang_source` build the source with it;
- `servedlatency`: the server's own inter-token latency, read around each window;
- `profilerextras`: what the server's profiler records beyond kernels (stacks, memory, shapes).

The versions followed, their hazards and what warpwatch does about each are in the modules'
docstrings and in docs/attach.md ("vLLM and SGLang").
"""

from __future__ import annotations

from ...sourcestats import FILE_KINDS, SKIP_REASONS
from .base import DEFAULT_TOKEN_ENV, ProfilingServerSource
from .dialect import Dialect
from .options import ServerOptions
from .sglang import SglangDialect
from .vllm import VllmDialect

__all__ = [
    "DEFAULT_TOKEN_ENV",
    "FILE_KINDS",
    "SKIP_REASONS",
    "Dialect",
    "ProfilingServerSource",
    "ServerOptions",
    "SglangDialect",
    "VllmDialect",
]
