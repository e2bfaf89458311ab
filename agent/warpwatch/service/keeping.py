"""Keeping a round's windows as evidence: each analysed window is judged (`evidence.rule`) and, when
kept, handed with a summary to a worker (`evidence.keeper`) that copies it into the store
(`evidence.store`); the round goes on at once. Its source gets the trace back (may delete it) only
once the copy is over. The window's id is reserved at the hand-over, so that it rides as an exemplar
at once; `/evidence/ID` answers 503 (pending) until the trace is written, 404 if the keep failed.
A keep that fails (the folder refuses it, it is too large, the queue is full, the agent stops first)
is counted by reason and logged; it never fails the window."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..capture import CapturedWindow
from ..capture.confine import RefusedFile, open_confined
from ..evidence.keeper import QUEUE, Keeper
from ..evidence.rule import REASONS, KeepRule, Verdict
from ..evidence.store import FAIL_REASONS, EvidenceError, EvidenceStore
from ..export.evidencemetrics import EvidenceView
from ..logs import RepeatFilter, event, limited_event
from ..model import WindowAnalysis

log = logging.getLogger("warpwatch.service")

SUMMARY_KERNELS = 16
"""Kernels (by GPU time) the JSON beside a kept trace summarises."""


def identity(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Where the agent runs: pod and namespace (the chart sets POD_NAME and POD_NAMESPACE), host."""
    env = os.environ if environ is None else environ
    out = {"host": socket.gethostname()}
    for key, name in (("pod", "POD_NAME"), ("namespace", "POD_NAMESPACE"), ("node", "NODE_NAME")):
        if env.get(name):
            out[key] = env[name]
    return out


@dataclass(frozen=True)
class Keep:
    """One window handed to the keeper: its reserved id, its trace, the JSON to keep beside it, why,
    and `release`, which gives the trace back to its source (called once, when the keep is over)."""

    id: str
    path: Path
    meta: dict[str, Any]
    reason: str
    release: Callable[[], None]
    judged_at: float


class Evidence:
    """The rule, the store and the keeper of one service (module doc); `offer` from the round thread."""

    def __init__(
        self,
        store: EvidenceStore,
        rule: KeepRule,
        clock: Callable[[], float],
        repeats: RepeatFilter,
        where: Mapping[str, str] | None = None,
        queue: int = QUEUE,
    ) -> None:
        self.store = store
        self.rule = rule
        self.clock = clock
        self.repeats = repeats
        self.where = dict(where if where is not None else identity())
        self.keeper: Keeper[Keep] = Keeper(self._keep, queue)
        self._counts_lock = threading.Lock()
        """Guards the counts and the rule (judged on the round's thread, given a lost baseline's
        slot back on the keeper's)."""
        self._kept = dict.fromkeys(REASONS, 0)
        self._failed: dict[str, int] = dict.fromkeys(FAIL_REASONS, 0)

    def open(self) -> None:
        """The folder created and read (at startup); one that cannot be is logged, and each keep then
        fails on its own, counted (`warpwatch_evidence_failed_total`)."""
        try:
            self.store.open()
        except OSError as exc:
            event(
                log,
                "evidence_unavailable",
                logging.WARNING,
                folder=str(self.store.folder),
                error=exc.strerror or str(exc),
            )
        else:
            event(
                log,
                "evidence_opened",
                folder=str(self.store.folder),
                windows=len(self.store.windows()),
                bytes=self.store.total_bytes(),
            )

    def offer(self, cw: CapturedWindow, analysis: WindowAnalysis | None, release: Callable[[], None]) -> str | None:
        """Judge one analysed window; when the rule keeps it, hand its trace to the keeper and return
        the id it is being kept as. `release` gives the trace back to its source: called once, after
        the copy, or before this returns when nothing was handed over."""
        try:
            kid = self._hand(cw, analysis, release)
        except BaseException:
            release()
            raise
        if kid is None:
            release()
        return kid

    def _hand(self, cw: CapturedWindow, analysis: WindowAnalysis | None, release: Callable[[], None]) -> str | None:
        if analysis is None or cw.path is None:
            return None
        now = self.clock()
        with self._counts_lock:
            verdict = self.rule.judge(analysis, now)
        if verdict.reason is None:
            return None
        meta = window_meta(cw, analysis, verdict, now, self.where)
        keep = Keep(self.store.reserve(), cw.path, meta, verdict.reason, release, now)
        if self.keeper.hand(keep):
            return keep.id
        self.store.release(keep.id)
        if self.keeper.closed:  # a round that outlived the shutdown's wait
            self._count_failure(keep, EvidenceError("shutdown", "the agent is stopping"))
        else:
            self._count_failure(keep, EvidenceError("queue_full", f"{self.keeper.capacity} windows wait to be kept"))
        return None

    def _keep(self, keep: Keep) -> None:
        """The keeper's work: one window copied into the store, counted; then its trace released."""
        try:
            if self.keeper.abandoning():
                raise EvidenceError("shutdown", "the agent stopped before this window's trace was kept")
            # as the reader opened it: no link followed out of its folder, no FIFO swapped in since
            with open_confined(keep.path) as opened:
                kept = self.store.keep(Path(opened.reader_path), keep.meta, keep.id, cancelled=self.keeper.abandoning)
        except RefusedFile as exc:
            self._count_failure(keep, EvidenceError("io_error", str(exc)))
        except EvidenceError as exc:
            self._count_failure(keep, exc)
        except Exception as exc:  # a bug: counted, and the keeper goes on
            self._count_failure(keep, EvidenceError("io_error", f"unexpected {type(exc).__name__}: {exc}"))
        else:
            with self._counts_lock:
                self._kept[keep.reason] += 1
            event(log, "evidence_kept", id=kept.id, reason=keep.reason, file=keep.path.name, bytes=kept.bytes)
        finally:
            self.store.release(keep.id)
            _release(keep)

    def close(self, timeout: float) -> None:
        """Let the keeper finish for at most `timeout` seconds; what it had not started is counted
        (`shutdown`) and given back to its source."""
        for keep in self.keeper.close(timeout):
            self.store.release(keep.id)
            self._count_failure(keep, EvidenceError("shutdown", "the agent stopped before this window was kept"))
            _release(keep)

    def _count_failure(self, keep: Keep, exc: EvidenceError) -> None:
        """Counted and logged; a baseline not kept (queue full, copy failed) gives the hour's slot
        back, so that the next ordinary window takes it."""
        with self._counts_lock:
            self._failed[exc.reason] += 1
            if keep.reason == "baseline":
                self.rule.baseline_lost(keep.judged_at)
        limited_event(
            log,
            self.repeats,
            ("evidence_failed", exc.reason),
            "evidence_failed",
            logging.WARNING,
            id=keep.id,
            file=keep.path.name,
            reason=exc.reason,
            error=str(exc),
        )

    def view(self) -> EvidenceView:
        windows = self.store.windows()
        with self._counts_lock:
            return EvidenceView(dict(self._kept), dict(self._failed), sum(k.bytes for k in windows), len(windows))


def _release(keep: Keep) -> None:
    """Give the trace back to its source; a source that fails at it must not stop the keeper."""
    try:
        keep.release()
    except Exception as exc:
        event(log, "evidence_release_failed", logging.ERROR, exc_info=exc, file=keep.path.name, error=str(exc))


def window_meta(
    cw: CapturedWindow, analysis: WindowAnalysis, verdict: Verdict, now: float, where: Mapping[str, str]
) -> dict[str, Any]:
    """The JSON beside a kept trace: when, where, which GPUs, why, and the window's summary."""
    w = analysis.window
    return {
        "time": now,
        "window": {"start_us": w.t0, "end_us": w.t1, "bounds": w.bounds},
        "requested_us": list(cw.requested) if cw.requested is not None else None,
        **where,
        "source": cw.source,
        "labels": dict(cw.labels),
        "file": cw.path.name if cw.path is not None else None,
        "rank": analysis.rank,
        "gpus": [d.device for d in analysis.devices],
        "reason": verdict.reason,
        "degraded": [
            {"gpu": d.gpu, "kernel": d.kernel, "estimated_occupancy": d.occupancy, "level": d.level}
            for d in verdict.degraded
        ],
        "summary": {
            "launches": analysis.launch_count,
            "artifacts": dict(analysis.artifacts),
            "devices": [
                {
                    "gpu": d.device,
                    "estimated_occupancy": d.estimated_occupancy,
                    "busy_ratio": d.busy_ratio,
                    "low_confidence": d.low_confidence,
                    "low_confidence_reasons": list(d.low_confidence_reasons),
                }
                for d in analysis.devices
            ],
            "kernels": [
                {
                    "gpu": k.device,
                    "kernel": k.name,
                    "estimated_occupancy": k.estimated_occupancy,
                    "time_share": k.time_share,
                    "artifacts": dict(k.artifacts),
                }
                for k in analysis.kernels[:SUMMARY_KERNELS]
            ],
        },
    }
