"""Capture through vLLM's and SGLang's own profiling endpoints.

Both servers can start and stop `torch.profiler` in their workers on request and write one
Kineto trace per worker (tensor-parallel rank) into a folder the agent must see (a shared
volume; `trace_dir` is that folder as the agent sees it). The pieces:

- `serverbase`: one window (start, wait, stop, collect), back-off, counters (`stats`);
- `serversession`: which files in the folder belong to one of warpwatch's sessions, when they
  are complete, and what happens to the ones that come after their window gave up;
- `serverhttp`: the HTTP client (retries only for requests that never reached the server,
  bearer token from the environment, no redirects, no proxy);
- `vllm` and `sglang`: what each server's versions take and the names their files have.

The versions followed, their hazards and what warpwatch does about each are in the modules'
docstrings and in the README ("vLLM and SGLang").
"""

from __future__ import annotations

from ..sourcestats import FILE_KINDS, SKIP_REASONS
from .serverbase import DEFAULT_TOKEN_ENV
from .sglang import SglangSource
from .vllm import VllmSource

__all__ = ["DEFAULT_TOKEN_ENV", "FILE_KINDS", "SKIP_REASONS", "SglangSource", "VllmSource"]
