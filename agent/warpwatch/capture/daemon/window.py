"""One capture window of the daemon source: which clients it waits for and how long, who was
served a config, and what each client's part of the window came to.

Each client that is ready when the window opens is waited for 1.5 of *its own* poll intervals
+ 1 s (`accept_s`), so a client that polls rarely, or a sender whose gaps are not an interval
yet (`Client.wait_interval`), sets only its own wait; the window accepts until every such
client is served or its wait is over. A config the agent lost (answered too late for Kineto, or
not sent) is offered again at the client's next poll, and the client's wait counts again from
the loss, up to twice its first wait (`Window.retry`, `longest_accept_s`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .. import CapturedWindow
from .clients import MAX_CLIENTS, Client
from .files import TraceFiles
from .wire import Address

KINETO_FINISH_S = 2.0
"""Kineto's profiler loop ticks once a second: a trace file appears up to ~2 s after its window
ends (1-1.5 s seen with torch 2.13), so a window never waits less than this for its file."""
MAX_ACCEPT_S = 15.0
"""Longest a window waits for ready clients to collect their configs (three polls at Kineto's
default 5 s interval): a client that missed its poll is not waited for beyond this."""


def accept_s(interval_s: float) -> float:
    """How long a window waits for a client polling every `interval_s` to collect its config."""
    return min(1.5 * interval_s + 1.0, MAX_ACCEPT_S)


def longest_accept_s(interval_s: float) -> float:
    """The most it waits for that client when the agent lost its configs (`Window.retry`):
    twice `accept_s` from opening, `MAX_ACCEPT_S` at most."""
    return min(2.0 * accept_s(interval_s), MAX_ACCEPT_S)


@dataclass(frozen=True)
class Served:
    """One client's part of a window: the config it was sent; its file is `<stem>_<pid>.json`."""

    key: Address
    pid: int
    stem: str
    requested: tuple[float, float]
    sent_at: float


@dataclass
class Window:
    """The window being captured. While `accepting`, each poll of a client that can trace and
    was not served yet is answered with a config; `expected` are the clients ready at opening,
    each with its pid and how long the window waits for it."""

    window_id: str
    duration_ms: int
    opened: float
    accept_until: float
    expected: dict[Address, tuple[int, float]]
    served: dict[Address, Served] = field(default_factory=dict)
    busy: set[Address] = field(default_factory=set)
    accepting: bool = True
    offered: int = 0
    """File stems handed out so far: each offer gets a new one, even after a config was taken
    back (`served` shrinks then), so no two clients ever share a stem and its files."""
    max_newcomers: int = MAX_CLIENTS
    """Configs for senders not `expected` at opening: each costs a file looked for on every pass
    of `capture` and a stem swept for `ABANDONED_KEEP_S`, so a flood of fresh sender addresses
    during the accept period must not make them unbounded. The expected are always served."""
    newcomers: int = 0
    lost: set[Address] = field(default_factory=set)
    """Clients whose config the agent lost (`retry`)."""

    @classmethod
    def open(
        cls,
        window_id: str,
        duration_ms: int,
        clients: Iterable[Client],
        hint_s: float,
        timeout_s: float,
        now: float,
        max_newcomers: int = MAX_CLIENTS,
    ) -> Window:
        """A window over the `clients` ready now; with none, it waits for a newcomer at most
        `accept_s(hint_s)` and `timeout_s` (but half a second at least)."""
        expected = {
            c.key: (c.pids[0], accept_s(c.wait_interval(hint_s)))
            for c in clients
            if c.can_trace and c.is_live(now, hint_s)
        }
        accept_for = max((wait for _pid, wait in expected.values()), default=0.0)
        if not expected:
            accept_for = min(accept_s(hint_s), max(timeout_s, 0.5))
        return cls(window_id, duration_ms, now, now + accept_for, expected, max_newcomers=max_newcomers)

    def offer(self, sender: Address, can_trace: bool, now: float) -> str | None:
        """The file stem to serve `sender` a config under now, or None ("nothing to do")."""
        if not self.accepting or sender in self.served:
            return None
        if not can_trace:
            if sender in self.expected:
                self.busy.add(sender)
            return None
        if now > self.accept_until:
            return None
        if sender not in self.expected:
            if self.newcomers >= self.max_newcomers:
                return None
            self.newcomers += 1  # per offer: the bound is on the work, whoever asks
        self.offered += 1
        return f"warpwatch_{self.window_id}-{self.offered - 1}"

    def retry(self, key: Address, now: float, interval_s: float) -> bool:
        """The config served to `key` never reached it (the agent answered after Kineto's reply
        deadline, or the send failed): its next poll is offered one again, and an expected client
        is waited for `accept_s` of its interval from now (`longest_accept_s` from opening at most),
        so that the agent's own stall does not cost the client its window. The window accepts
        again (`settle` may have stopped it on seeing every client served while the reply was on
        its way) until `settle` says otherwise. False when nothing was served to `key`."""
        if self.served.pop(key, None) is None:
            return False
        self.lost.add(key)
        self.accepting = True
        if key in self.expected:
            pid, wait = self.expected[key]
            wait = min(max(wait, now - self.opened + accept_s(interval_s)), longest_accept_s(interval_s))
            self.expected[key] = (pid, wait)
            self.accept_until = max(self.accept_until, self.opened + wait)
        return True

    def settle(self, now: float) -> None:
        """Stop accepting once the longest wait is over, or every expected client is served or
        was waited for as long as its own interval asks."""
        if self.accepting and (
            now > self.accept_until
            or (
                self.expected
                and all(key in self.served or now > self.opened + wait for key, (_pid, wait) in self.expected.items())
            )
        ):
            self.accepting = False

    def missed(self, source: str) -> list[CapturedWindow]:
        """A "timed_out" window for each expected client that never collected its config."""
        out = []
        for key, (pid, wait) in self.expected.items():
            if key in self.served:
                continue
            if key in self.busy:
                reason = "was busy with another trace"
            elif key in self.lost:
                reason = "did not get it: the agent's reply came too late for it or could not be sent (replies_dropped)"
            else:
                reason = "did not poll for it (process gone or hung?)"
            out.append(
                CapturedWindow(
                    source,
                    None,
                    {"process": str(pid)},
                    None,
                    f"pid {pid}: no trace config delivered within {wait:.1f} s: the client {reason}",
                    "timed_out",
                )
            )
        return out


def served_result(
    source: str, files: TraceFiles, item: Served, waited_s: float, limit_s: float
) -> CapturedWindow | None:
    """The client's trace once its file is there; "timed_out" after `limit_s` without one; None
    while it may still come."""
    path = files.find(item.stem, item.pid)
    labels = {"process": str(item.pid)}
    if path is not None:
        return CapturedWindow(source, path, labels, item.requested, on_done=files.on_done(item.stem))
    if waited_s <= limit_s:
        return None
    return CapturedWindow(
        source,
        None,
        labels,
        item.requested,
        f"pid {item.pid}: no trace file {item.stem}_{item.pid}.json in {files.trace_dir} "
        f"{limit_s:.1f} s after sending the config (process gone, start refused, or Kineto wrote "
        "elsewhere: new Kineto writes on-demand traces only under /tmp/ or $KINETO_ONDEMAND_TRACE_DIR)",
        "timed_out",
    )


def closed_result(source: str, item: Served) -> CapturedWindow:
    return CapturedWindow(
        source,
        None,
        {"process": str(item.pid)},
        item.requested,
        f"pid {item.pid}: source closed before the trace file came",
        "failed",
    )
