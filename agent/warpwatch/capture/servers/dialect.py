"""What differs between the profiling servers: one `Dialect` per engine (`vllm.VllmDialect`,
`sglang.SglangDialect`), given to the one generic source (`base.ProfilingServerSource`).

Everything an engine must state is abstract here, with no default to inherit by accident: its
name and the histograms its `/metrics` has, the requests it takes (and the checks before a start),
how its stops and sessions behave, and the names of its trace files. What every engine shares
lives in `base` and the pieces it composes."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

from .. import CapturedWindow
from .backoff import Backoff
from .client import Reply, ServerClient
from .options import ServerOptions
from .session import Session


class Dialect(abc.ABC):
    """One server's requests, behaviour and trace names (module doc)."""

    kind: ClassVar[str]
    """The engine ("vllm", "sglang"): it starts the source's messages and its default name."""
    inter_token_histograms: ClassVar[tuple[str, ...]]
    """The server's inter-token latency histogram, by its names newest first (`servedlatency`)."""
    first_token_histograms: ClassVar[tuple[str, ...]]
    """The server's time-to-first-token histogram, added to the inter-token one's (`servedlatency`)."""
    generated_counters: ClassVar[tuple[str, ...]]
    """The server's counter of generated tokens, by its exposed sample names newest first (`servedlatency`)."""
    requests_before_start: ClassVar[int]
    """Requests `before_start` may send (each with its retries); they bound the capture's overhead."""
    names_sessions: ClassVar[bool]
    """Whether the start names the session's files (`start_body`'s prefix): an earlier run's
    files are then told apart and claimed (`leftovers`)."""

    @abc.abstractmethod
    def before_start(self, client: ServerClient, options: ServerOptions, backoff: Backoff) -> CapturedWindow | None:
        """A refusal (a failed window from `backoff`) when starting now is not safe, else None."""

    @abc.abstractmethod
    def start_body(self, prefix: str | None) -> bytes | None:
        """The body of `POST /start_profile` (None: no body); `prefix` names the session's files
        where the server takes a name (`names_sessions`)."""

    @abc.abstractmethod
    def refusal_reason(self, reply: Reply) -> str | None:
        """A `sourcestats.SKIP_REASONS` entry when a refused start means the window was skipped on purpose."""

    @abc.abstractmethod
    def stop_waits_for_files(self) -> bool:
        """Whether `/stop_profile` answers only after every rank has written its trace."""

    @abc.abstractmethod
    def expected(self, expected_files: int | None) -> int | None:
        """Worker files one window should give: from `expected_files` (the source's setting), or
        what the server reports; None when unknown."""

    @abc.abstractmethod
    def step_bounded(self) -> bool:
        """Whether a window is a profile the server ends by itself (never sent a stop)."""

    @abc.abstractmethod
    def session_filter(self) -> Callable[[str], bool] | None:
        """Which trace names a step-bounded session may own (None: any)."""

    @abc.abstractmethod
    def late_filter(self, session: Session) -> Callable[[str], bool] | None:
        """Which names may still be `session`'s once its window is over (`session.accept`: any new
        one). A server whose file names tell sessions apart narrows it: a person's profile written
        into the same folder meanwhile is not taken (nor deleted)."""

    @abc.abstractmethod
    def is_trace_name(self, name: str) -> bool:
        """Whether a file in the trace folder is one of the server's traces."""

    @abc.abstractmethod
    def is_worker_trace(self, name: str) -> bool:
        """Whether a trace file is a worker's (with kernels), not the server front end's."""

    @abc.abstractmethod
    def labels_for(self, name: str) -> dict[str, str]:
        """The labels of a trace file's windows (`rank` and the like, else `process`)."""

    @abc.abstractmethod
    def enable_hint(self) -> str:
        """How to turn the server's profiler on, with the folder the agent reads."""

    @abc.abstractmethod
    def inspect_windows(
        self, source: str, trace_dir: Path, windows: list[CapturedWindow], files: Mapping[str, int]
    ) -> None:
        """Sees each round's windows (and the trace files counted by kind) before the service does."""
