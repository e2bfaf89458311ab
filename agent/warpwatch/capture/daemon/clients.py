"""The daemon's registry of Kineto clients: who polls, how often, and who makes room for whom.

A client is a sender address. Its poll interval is estimated from its own gaps only (the median
of its last `POLL_GAPS`, clamped to what Kineto can be configured to), so a sender with odd gaps
changes how long a window waits for *it*, never for the others. The registry is bounded: when it
is full a newcomer always gets in, and the client that makes room is, in this order, one silent
for longer than it could be polling, one that polled only once (one datagram is all a fake
sender costs itself), else the least recently seen.

Not thread-safe: the source calls it with its lock held.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from .wire import Address, printable

MAX_CLIENTS = 1024
"""Clients (sender addresses) remembered at once."""
POLL_GAPS = 5
"""A client's poll interval is the median of its last this many gaps between polls: one missed
poll (a long gap) or one duplicate (a short one) does not move it."""
TRUSTED_GAPS = 3
"""Gaps needed before a client's own estimate may make a window wait longer for it than the
default interval: two datagrams sent far apart are not a poll interval."""
MIN_POLL_INTERVAL_S = 1.0
"""Kineto's ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS is whole seconds, so no client polls faster."""
MAX_POLL_INTERVAL_S = 60.0
UNDELIVERABLE_SENDS = 3
"""Consecutive replies that could not be sent to a client before it is dropped from the registry."""


@dataclass(frozen=True)
class DaemonClient:
    """A snapshot of one registered Kineto client (one traced process).

    `address` is printable (abstract names start with "@"); times are seconds on the source's
    clock (`time.monotonic()`); `poll_interval_s` is the median of the last `POLL_GAPS` gaps
    between two polls, clamped to [`MIN_POLL_INTERVAL_S`, `MAX_POLL_INTERVAL_S`] (None before a
    second poll).
    """

    address: str
    pids: tuple[int, ...]
    job_id: int
    can_trace: bool
    first_seen: float
    last_poll: float
    polls: int
    poll_interval_s: float | None
    gpu: int | None

    @property
    def pid(self) -> int:
        """The client's own pid, as seen in its pid namespace (first of `pids`)."""
        return self.pids[0] if self.pids else 0


@dataclass
class Client:
    key: Address
    pids: tuple[int, ...]
    job_id: int
    can_trace: bool
    first_seen: float
    last_poll: float
    polls: int = 0
    gpu: int | None = None
    failed_sends: int = 0
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=POLL_GAPS))

    @property
    def poll_interval_s(self) -> float | None:
        if not self.gaps:
            return None
        return min(max(statistics.median(self.gaps), MIN_POLL_INTERVAL_S), MAX_POLL_INTERVAL_S)

    def wait_interval(self, default_s: float) -> float:
        """The interval a window plans with for this client: its own once `TRUSTED_GAPS` gaps
        support it, else at most `default_s` (the source's poll interval hint)."""
        estimate = self.poll_interval_s
        if estimate is None:
            return default_s
        return estimate if len(self.gaps) >= TRUSTED_GAPS else min(estimate, default_s)

    def is_live(self, now: float, default_s: float) -> bool:
        """Heard from recently enough to be polling still (two intervals and a second)."""
        return now - self.last_poll <= 2 * self.wait_interval(default_s) + 1.0

    def snapshot(self) -> DaemonClient:
        return DaemonClient(
            address=printable(self.key),
            pids=self.pids,
            job_id=self.job_id,
            can_trace=self.can_trace,
            first_seen=self.first_seen,
            last_poll=self.last_poll,
            polls=self.polls,
            poll_interval_s=self.poll_interval_s,
            gpu=self.gpu,
        )


class ClientRegistry:
    """Clients by address, least recently heard from first (the dict's order)."""

    def __init__(self, default_interval_s: float, max_clients: int = MAX_CLIENTS) -> None:
        self.default_interval_s = default_interval_s
        self.max_clients = max_clients
        self._clients: dict[Address, Client] = {}
        self.seen = 0
        self.evicted: dict[str, int] = {"registry_full": 0, "undeliverable": 0}

    def __len__(self) -> int:
        return len(self._clients)

    def __contains__(self, key: Address) -> bool:
        return key in self._clients

    def values(self) -> list[Client]:
        return list(self._clients.values())

    def clear(self) -> None:
        self._clients.clear()

    def touch(self, key: Address, pids: tuple[int, ...], job_id: int, now: float) -> tuple[Client, Client | None]:
        """The sender's entry, made most recent (new if need be), and the client evicted to make
        room for it, if any."""
        client = self._clients.pop(key, None)
        evicted = None
        if client is None:
            if len(self._clients) >= self.max_clients:
                evicted = self._victim(now)
                del self._clients[evicted.key]
                self.evicted["registry_full"] += 1
            client = Client(key=key, pids=pids, job_id=job_id, can_trace=False, first_seen=now, last_poll=now)
            self.seen += 1
        self._clients[key] = client
        return client, evicted

    def poll(self, client: Client, now: float) -> None:
        """Record one "req" of `client` at `now` (after `touch`)."""
        if client.polls:
            client.gaps.append(now - client.last_poll)
        client.polls += 1
        client.last_poll = now

    def _victim(self, now: float) -> Client:
        oldest = next(iter(self._clients.values()))
        if not oldest.is_live(now, self.default_interval_s):
            return oldest
        # One-shot senders first: a real client polls again within its interval. The scan stops
        # at the first one, which under a flood of one-shots is at the front.
        return next((c for c in self._clients.values() if c.polls <= 1), oldest)

    def undeliverable(self, key: Address) -> Client | None:
        """Count a reply that could not be sent to `key`; the client, removed, once that has
        happened `UNDELIVERABLE_SENDS` times in a row."""
        client = self._clients.get(key)
        if client is None:
            return None
        client.failed_sends += 1
        if client.failed_sends < UNDELIVERABLE_SENDS:
            return None
        del self._clients[key]
        self.evicted["undeliverable"] += 1
        return client

    def get(self, key: Address) -> Client | None:
        return self._clients.get(key)

    def delivered(self, key: Address) -> None:
        client = self._clients.get(key)
        if client is not None:
            client.failed_sends = 0

    def prune(self, now: float, ttl_s: float) -> list[Client]:
        """Forget (and return) clients that have not polled for more than `ttl_s` (a "ctxt" moves
        a client to the back without being a poll, so every entry is looked at)."""
        gone = [c for c in self._clients.values() if now - c.last_poll > ttl_s]
        for client in gone:
            del self._clients[client.key]
        return gone
