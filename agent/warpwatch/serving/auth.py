"""Basic-auth checks off the event loop, in a bounded queue that is fair between clients.

bcrypt is slow on purpose (about 50 ms at cost 10 on one core), so a flood of wrong passwords
must neither take every core nor make a legitimate scrape wait behind it:

- credentials verified before are answered from the cache at once (`basicauth.BasicAuth.cached`),
  without queueing: a Prometheus that scraped once is never slowed down by guessers;
- the others wait in one queue per client address, served round-robin by `workers` threads,
  so a new client waits for at most one check per other waiting client, however many requests
  each of them has queued;
- at most `per_client` checks may wait per address and `total` in all; beyond that the request
  is answered 429 Too Many Requests at once (with `Retry-After`), before any bcrypt.

Known and unknown user names go through the same queue and cost the same bcrypt
(`WebConfig.dummy_hash`), so neither the queue nor the check tells them apart. The pool's
threads are ordinary (non-daemon) threads that `close()` joins after cancelling what still
waits: a bcrypt in progress always finishes, and never runs while the interpreter exits.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor

from .basicauth import BasicAuth
from .webconfig import WebConfig

BUSY = None
"""What `AuthQueue.check` returns when the queue is full (answer 429)."""


class AuthQueue:
    """Fair, bounded basic-auth checking for one event loop (module doc), with the server's own
    `BasicAuth` (its cache of successful checks). Not thread-safe: call from the loop's thread only."""

    def __init__(self, web: WebConfig, *, workers: int = 2, per_client: int = 4, total: int = 64) -> None:
        self.web = web
        self.basic = BasicAuth(web)
        self.workers = workers
        self.per_client = per_client
        self.total = total
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="warpwatch-auth")
        self._waiting: OrderedDict[str, deque[tuple[str | None, asyncio.Future[bool]]]] = OrderedDict()
        self._queued = 0
        self._running = 0
        self.rejected = 0
        """Requests answered 429 because the queue was full."""

    @property
    def queued(self) -> int:
        """How many checks wait for a worker now (at most `total`; those in progress not counted)."""
        return self._queued

    async def check(self, client: str, authorization: str | None) -> bool | None:
        """True/False: the credentials are good or not; None (`BUSY`): the queue is full."""
        if self.basic.cached(authorization):
            return True
        queue = self._waiting.get(client)
        if self.queued >= self.total or (queue is not None and len(queue) >= self.per_client):
            self.rejected += 1
            return BUSY
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if queue is None:
            queue = self._waiting[client] = deque()
        queue.append((authorization, future))
        self._queued += 1
        self._pump()
        return await future

    def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        while self._running < self.workers and self._waiting:
            client, queue = next(iter(self._waiting.items()))
            authorization, future = queue.popleft()
            self._queued -= 1
            if queue:
                self._waiting.move_to_end(client)  # round-robin: this client's next one waits its turn
            else:
                del self._waiting[client]
            if future.done():  # the request went away meanwhile
                continue
            self._running += 1
            work = loop.run_in_executor(self._pool, self.basic.check, authorization)
            work.add_done_callback(functools.partial(self._finished, future=future))

    def _finished(self, work: asyncio.Future[bool], *, future: asyncio.Future[bool]) -> None:
        self._running -= 1
        if not future.done():
            if work.cancelled():
                future.cancel()
            elif work.exception() is not None:
                future.set_result(False)
            else:
                future.set_result(work.result())
        if self._waiting:
            self._pump()

    def close(self, wait: bool = True) -> None:
        """Cancel what waits; with `wait`, join the checks in progress (each one bcrypt)."""
        for queue in self._waiting.values():
            for _, future in queue:
                future.cancel()
        self._waiting.clear()
        self._queued = 0
        self._pool.shutdown(wait=wait, cancel_futures=True)
