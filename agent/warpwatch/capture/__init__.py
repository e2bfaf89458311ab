"""Capture: where windows come from.

A *source* turns "open a window now" into zero or more finished trace files. The service
calls `Source.capture()` once per scheduled window (never concurrently), analyses every
`CapturedWindow` it returns, and calls `CapturedWindow.done()` afterwards so the source can
delete or forget the file. Sources never analyse and never touch Prometheus.

To add a source: subclass `Source` in a module of this package, declare who times its windows
(`Source.windows_timed_by`), and register its spec prefix in `warpwatch.capture.registry.build_source`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from ..model import Outcome
from ..overhead import LatencySplit
from ..sourcestats import SourceStats

__all__ = ["CaptureFailure", "CapturedWindow", "Outcome", "Source", "SourceStats", "WindowTimer"]

CaptureFailure = Literal["failed", "timed_out", "raised"]
"""Why a window came without a trace file: the source said so (failed), it took too long
(timed_out), or its `capture()` raised (a bug). Counted as the fault `("capture", kind)`."""


@dataclass(frozen=True)
class CapturedWindow:
    """One trace produced for one window, or the reason none came.

    `path` is None when the window failed before a file existed; `error` then says why and
    `outcome` is "failed" or "timed_out". `requested` is the capture interval the source asked
    for, as Unix epoch microseconds, used when the trace has no `Trace` span event.
    `labels` carries `process`/`rank` and similar identities of the traced process.
    """

    source: str
    path: Path | None
    labels: dict[str, str] = field(default_factory=dict)
    requested: tuple[float, float] | None = None
    error: str | None = None
    outcome: Outcome | None = None
    on_done: Callable[[bool], None] | None = None
    """Called with True when the window was analysed (any outcome), so the source may delete it."""
    failure: CaptureFailure | None = None
    """The kind of failure of a window without a file, where it is not its outcome ("raised")."""

    def done(self, processed: bool = True) -> None:
        if self.on_done is not None:
            self.on_done(processed)

    @property
    def failure_kind(self) -> CaptureFailure:
        """The kind of failure of a window without a file: `failure` when set, else its outcome."""
        if self.failure is not None:
            return self.failure
        return "timed_out" if self.outcome == "timed_out" else "failed"


WindowTimer = Literal["agent", "producer"]
"""Who decides where a source's windows start and end (`Source.windows_timed_by`)."""


class Source(abc.ABC):
    """Where windows come from: one instance per `--source` spec. Everything the service uses of a
    source is declared here; `capture` is the one member without a default."""

    name: str
    """The spec as the user wrote it (used in logs and metrics)."""

    windows_timed_by: ClassVar[WindowTimer] = "agent"
    """"agent": `capture` opens a window of the `window_s` the agent asks for, which
    --adaptive-window lengthens after long kernels (kineto-daemon, vllm, sglang). "producer": the
    windows were timed by whoever wrote the traces (dir:, replay:); such a source is asked for the
    configured --window, and its kernels never lengthen the agent's window."""

    def start(self) -> None:  # noqa: B027 (a source without resources needs no start)
        """Acquire resources (bind sockets, check folders). Raise CaptureError to refuse."""

    @abc.abstractmethod
    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        """Open one window of `window_s` seconds and return what it produced.

        Blocks at most about `window_s + timeout_s + capture_overhead_s`. Returns [] when nothing
        is there yet. Must not raise for expected failures: return a CapturedWindow with `error`
        set.
        """

    def finish(self, timeout_s: float) -> None:  # noqa: B027 (a source with nothing in flight)
        """At shutdown, before `close`: wait up to `timeout_s` for what is still in flight (a
        server still writing a window's files) and release it, saying in one log line what is left."""

    def close(self) -> None:  # noqa: B027 (a source without resources has nothing to release)
        """Release everything; called once at shutdown, possibly from another thread."""

    @property
    def capture_overhead_s(self) -> float:
        """Seconds a capture may take beyond `window_s + timeout_s` (e.g. the Kineto daemon's start
        lead and poll wait, an HTTP server's start/stop requests); the service bounds rounds with it."""
        return 0.0

    def stats(self) -> SourceStats:
        """What the source counts, for the agent's own metrics (`selfmetrics`); nothing by default."""
        return SourceStats()

    def take_stop_seconds(self) -> list[float]:
        """The stops answered since the last call, each from asking the traced process to end a
        window until it answered (`overhead`); none by default (a source that sends no stop)."""
        return []

    def take_cost_seconds(self) -> list[float]:
        """What each window since the last call cost the traced process, measured on the traced
        process's side, charged in place of its stop (`overhead`); none by default (the stops, or
        the served latency, are the measure)."""
        return []

    def served_latency(self) -> LatencySplit | None:
        """The served inter-token latency inside and outside windows, cumulative, where the source
        can read it (`overhead`); None by default."""
        return None
