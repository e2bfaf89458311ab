"""Adaptive capture windows (`--adaptive-window`): probe longer now and then, lengthen W when
kernels comparable to it show up. Pure logic; the service asks it for each round's window.

Kineto keeps only activities wholly inside the window: a kernel of duration d is captured with
probability (W - d)/W and never when d >= W, so a workload of long kernels reads as idle. For the
sources whose windows the agent times (`Source.windows_timed_by == "agent"`: kineto-daemon, vLLM,
SGLang; not dir: or replay:, whose producer cut them), the planner

- opens every `probe_every`-th window (the first one included) as a *probe* of
  `probe_factor` x W, shortened so that the average duty over a cycle of `probe_every` rounds stays
  within `max_duty` (a probe is paid for by the windows around it, not by a higher duty);
- after every round, lengthens W to `headroom` x the longest kernel captured (in a probe or not)
  when that kernel is longer than W / `headroom` — with headroom 4 such a kernel is captured with
  probability at least 3/4 — but never beyond `max_duty` x period;
- never shortens W again (a workload that ran a long kernel once will again; restart to reset).

Every window, probes included, is an ordinary sample: each launch is weighted by its own window's
W/(W - d) and the window adds its own W to the observed seconds, so pooled sums stay unbiased for
every kernel shorter than the windows that saw it. Kernels of d >= W are missed by the windows
before W grows past them, which the coverage signals show for that time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROBE_EVERY = 10
PROBE_FACTOR = 8.0
HEADROOM = 4.0


@dataclass(slots=True)
class WindowPlanner:
    """Decides each round's window length (seconds); see the module doc."""

    base: float
    """The configured window (`--window`): where W starts, and its lower bound."""
    period: float
    max_duty: float
    probe_every: int = PROBE_EVERY
    probe_factor: float = PROBE_FACTOR
    headroom: float = HEADROOM
    window: float = field(init=False)
    """The current (non-probe) window."""
    rounds: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.window = min(self.base, self.cap)

    @property
    def cap(self) -> float:
        """The longest window the duty cap allows, averaged over a cycle."""
        return self.max_duty * self.period

    def next(self) -> tuple[float, bool]:
        """The next round's window and whether it is a probe."""
        probing = self.rounds % self.probe_every == 0
        self.rounds += 1
        if probing:
            budget = self.probe_every * self.cap - (self.probe_every - 1) * self.window
            probe = min(self.probe_factor * self.window, budget)
            if probe > self.window:
                return probe, True
        return self.window, False

    def observe(self, longest_kernel: float) -> bool:
        """The longest kernel (seconds) captured in a round's windows; True when W grew."""
        if longest_kernel * self.headroom <= self.window:
            return False
        grown = min(self.cap, longest_kernel * self.headroom)
        if grown <= self.window:
            return False
        self.window = grown
        return True
