"""What one round does (the package doc): a step of the wall clock counted, NVML sampled around
every source's capture (`fanout`), each captured window read and analysed (`window`), the results
folded into the builder, the window adapted (`windowplan`), and the new snapshot published."""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Sequence

from ..capture import CapturedWindow, Source
from ..config import MAX_DUTY, MAX_PERIOD_S, Config
from ..export.builder import SnapshotBuilder, WindowResult
from ..export.nvml import Nvml, NvmlReading, gpu_infos
from ..logs import RepeatFilter, event, limited_event
from ..membudget import MemoryBudget
from ..model import DeviceProperties, Fault
from ..overhead import OverheadLedger
from .costs import note_costs
from .evidence import Evidence
from .exposition import Exposition
from .fanout import CaptureFanout
from .health import ClockWatch
from .window import WindowReading, read_window, repeat_key
from .windowplan import WindowPlanner, agent_chooses_window

log = logging.getLogger("warpwatch.service")


class Rounds:
    """The work of the service's rounds, one at a time (`Service.run_round` holds the round lock)."""

    def __init__(
        self,
        config: Config,
        *,
        exposition: Exposition,
        nvml: Nvml,
        fanout: CaptureFanout,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
        memory: MemoryBudget,
        stopping: Callable[[], bool],
    ) -> None:
        self.config = config
        self.exposition = exposition
        self.nvml = nvml
        self.fanout = fanout
        self.clock = clock
        self.memory = memory
        self.stopping = stopping
        self.planner = (
            WindowPlanner(config.window, config.period, max(MAX_DUTY, config.duty)) if config.adaptive_window else None
        )
        """--adaptive-window: each round's window (windowplan)."""
        self.overhead = OverheadLedger(config.overhead_budget, config.period, MAX_PERIOD_S)
        """What the windows cost the traced servers, and the period within --overhead-budget (`overhead`)."""
        self.on_period: Callable[[float], None] | None = None
        """Called with the new period when the budget changes it (the service's ticker)."""
        self.builder = SnapshotBuilder(
            top_kernels=config.top_kernels,
            capture_duty=self.duty_now,
            capture_period=self.period_now,
            capture_window=self.window_now,
            max_gpus=config.max_gpus,
            kernel_gauges=config.kernel_gauges,
        )
        self.clock_watch = ClockWatch(clock, monotonic)
        self.gpu_properties: dict[int, DeviceProperties] | None = None
        """Device properties for traces that carry none (`--gpu-properties`)."""
        self.repeats = RepeatFilter()
        self.evidence: Evidence | None = None
        """--evidence-dir: where the traces of the windows that matter are kept (`evidence`)."""
        self.late_faults: deque[Fault] = deque()
        """Faults noted outside the round thread (overruns), counted by the next round."""
        self.exposition.publish(self.builder.snapshot())

    def period_now(self) -> float:
        """The period in force: --period, stretched while the measured cost exceeds the budget."""
        return self.overhead.period

    def duty_now(self) -> float:
        return self.config.window / self.overhead.period

    def window_now(self) -> float:
        """The window the agent asks its sources for now (`--adaptive-window` lengthens it)."""
        return self.planner.window if self.planner is not None else self.config.window

    def run(self, sources: Sequence[Source]) -> None:
        """One round over `sources`."""
        if (step := self.clock_watch.step()) is not None:
            self.builder.add_fault("clock", "jump")
            limited_event(
                log,
                self.repeats,
                ("clock_jump",),
                "clock_jump",
                logging.WARNING,
                seconds=round(step, 3),
                reason="the wall clock was stepped; window timestamps follow it, scheduling and durations do not",
            )
        self.nvml.begin()
        window = self.planner.next()[0] if self.planner is not None else self.config.window
        windows = self.fanout.capture(
            sources, window, self.config.window, self.config.collect_timeout, on_busy=self._source_busy
        )
        reading = self.nvml.end()
        if (
            period := note_costs(self.overhead, sources, window=self.config.window)
        ) is not None and self.on_period is not None:
            self.on_period(period)
        while self.late_faults:
            self.builder.add_fault(*self.late_faults.popleft())
        for reason, count in self.nvml.take_errors().items():
            self.builder.add_fault("nvml", reason, count)
        results: list[WindowResult] = []
        for cw in windows:
            if self.stopping():
                cw.done(False)  # abandoned: the source may offer it again
                continue
            result = self.process_window(cw)
            self.builder.record(result, self.clock())
            results.append(result)
        self.builder.apply_round(results)
        self._adapt_window(results)
        self.publish_nvml(reading)

    def failed(self, exc: Exception) -> None:
        """A round raised (a bug, not an expected failure): one line (traceback at debug level), counted."""
        error = f"{type(exc).__name__}: {exc}"
        limited_event(
            log,
            self.repeats,
            repeat_key("round_failed", error),
            "round_failed",
            logging.ERROR,
            exc_info=exc,
            error=error,
        )
        try:
            self.builder.record(WindowResult("round", "round", "failed", fault=("round", "unexpected")), self.clock())
            self.exposition.publish(self.builder.snapshot())
        except Exception as exc2:
            event(log, "publish_failed", logging.ERROR, error=str(exc2))

    def _source_busy(self, src: Source) -> None:
        self.builder.add_fault("capture", "skipped_busy")
        limited_event(
            log,
            self.repeats,
            ("source_busy", src.name),
            "source_busy",
            logging.WARNING,
            source=src.name,
            reason="its previous capture has not returned; skipping this round",
        )

    def _adapt_window(self, results: Sequence[WindowResult]) -> None:
        """--adaptive-window: lengthen the window after a round that captured long kernels."""
        longest = max(
            (
                d.longest_kernel / 1e6
                for r in results
                if r.analysis is not None and agent_chooses_window(r.source)
                for d in r.analysis.devices
            ),
            default=0.0,
        )
        if self.planner is not None and self.planner.observe(longest):
            event(log, "window_lengthened", window_s=round(self.planner.window, 6), longest_kernel_s=round(longest, 6))

    def publish_nvml(self, reading: NvmlReading) -> None:
        """NVML's reading and devices into the builder, and the snapshot published."""
        self.builder.set_nvml(reading.up, reading.samples(), gpu_infos(self.nvml.gpus))
        self.exposition.publish(self.builder.snapshot())

    def process_window(self, cw: CapturedWindow) -> WindowResult:
        """Open (confined to its folder), read and analyse one window (`window.read_window`), and offer
        it as evidence: a kept window's trace goes to the evidence worker, its id rides on its GPUs'
        counters at once, and its source may delete the trace only once the copy is over."""
        if self.evidence is None:
            return read_window(cw, self._reading())
        held: list[bool] = []
        result = read_window(dataclasses.replace(cw, on_done=held.append), self._reading())

        def release() -> None:
            for processed in held:
                cw.done(processed)

        kid = self.evidence.offer(cw, result.analysis, release)
        if kid is not None and result.analysis is not None:
            self.builder.note_evidence((d.device for d in result.analysis.devices), kid, self.clock())
        return result

    def _reading(self) -> WindowReading:
        return WindowReading(self.config.max_trace_bytes, self.memory, self.gpu_properties, self.stopping, self.repeats)
