"""Keeping a round's windows as evidence: each analysed window is judged (`evidence.rule`) and, when
kept, copied into the store (`evidence.store`) with a summary beside it, before its source may delete
the trace. A failed keep is counted and logged; it never fails the window."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..capture import CapturedWindow
from ..evidence.rule import REASONS, KeepRule, Verdict
from ..evidence.store import FAIL_REASONS, EvidenceError, EvidenceStore, EvidenceView, KeptWindow
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


class Evidence:
    """The rule and the store of one service (module doc); `offer` from the round thread only."""

    def __init__(
        self,
        store: EvidenceStore,
        rule: KeepRule,
        clock: Callable[[], float],
        repeats: RepeatFilter,
        where: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        self.rule = rule
        self.clock = clock
        self.repeats = repeats
        self.where = dict(where if where is not None else identity())
        self._counts_lock = threading.Lock()
        self._kept = dict.fromkeys(REASONS, 0)
        self._failed: dict[str, int] = dict.fromkeys(FAIL_REASONS, 0)

    def offer(self, cw: CapturedWindow, analysis: WindowAnalysis | None) -> KeptWindow | None:
        """Judge one analysed window and keep its trace when the rule says so; the kept window or None."""
        if analysis is None or cw.path is None:
            return None
        now = self.clock()
        verdict = self.rule.judge(analysis, now)
        if verdict.reason is None:
            return None
        try:
            kept = self.store.keep(cw.path, window_meta(cw, analysis, verdict, now, self.where))
        except EvidenceError as exc:
            with self._counts_lock:
                self._failed[exc.reason] += 1
            limited_event(
                log,
                self.repeats,
                ("evidence_failed", exc.reason),
                "evidence_failed",
                logging.WARNING,
                file=cw.path.name,
                reason=exc.reason,
                error=str(exc),
            )
            return None
        with self._counts_lock:
            self._kept[verdict.reason] += 1
        event(log, "evidence_kept", id=kept.id, reason=verdict.reason, file=cw.path.name, bytes=kept.bytes)
        return kept

    def view(self) -> EvidenceView:
        windows = self.store.windows()
        with self._counts_lock:
            return EvidenceView(dict(self._kept), dict(self._failed), sum(k.bytes for k in windows), len(windows))


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
