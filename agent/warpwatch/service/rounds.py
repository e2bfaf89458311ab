"""What one round does (the package doc): a step of the wall clock counted, NVML sampled around
every source's capture (`fanout`), each captured window read and analysed (`reading`), the results
folded into the builder, the window adapted (`windowplan`), and the new snapshot published."""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Collection, Sequence

from ..capture import CapturedWindow, Source
from ..config.table import MAX_DUTY, Config
from ..export.builder import SnapshotBuilder, WindowResult
from ..export.nvml import Nvml, NvmlReading, gpu_infos
from ..logs import RepeatFilter, event, limited_event
from ..model import DeviceProperties, Fault
from ..overhead import OverheadLedger
from ..runtime.membudget import MemoryBudget
from .clockwatch import ClockWatch
from .costs import note_costs
from .exposition import Exposition
from .fanout import CaptureFanout
from .keeping import Evidence
from .reading import WindowReading, read_window, repeat_key
from .windowplan import WindowPlanner

log = logging.getLogger("warpwatch.service")


class Rounds:
    """The work of the service's rounds, one at a time (`Service.run_round` holds the round lock).
    Built whole by `startup.assemble`; what a round needs that startup loads (the sources, the GPU
    properties) comes with each `run`."""

    def __init__(
        self,
        config: Config,
        *,
        exposition: Exposition,
        nvml: Nvml,
        fanout: CaptureFanout,
        overhead: OverheadLedger,
        evidence: Evidence | None,
        repeats: RepeatFilter,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
        memory: MemoryBudget,
        stopping: Callable[[], bool],
        on_period: Callable[[float], None],
    ) -> None:
        """`overhead`: what the windows cost the traced servers, and the period within
        --overhead-budget; `on_period` is called with the new period when that changes it (the
        service's ticker). `evidence`: where --evidence-dir keeps the windows that matter.
        `repeats` rate-limits the repeated log lines, shared with the evidence."""
        self._config = config
        self._exposition = exposition
        self._nvml = nvml
        self._fanout = fanout
        self._overhead = overhead
        self._evidence = evidence
        self._repeats = repeats
        self._clock = clock
        self._memory = memory
        self._stopping = stopping
        self._on_period = on_period
        self._planner = (
            WindowPlanner(config.window, config.period, max(MAX_DUTY, config.duty)) if config.adaptive_window else None
        )
        """--adaptive-window: each round's window (windowplan)."""
        self._builder = SnapshotBuilder(
            top_kernels=config.top_kernels,
            capture_duty=self.duty_now,
            capture_period=self.period_now,
            capture_window=self.window_now,
            max_gpus=config.max_gpus,
            kernel_gauges=config.kernel_gauges,
        )
        self._clock_watch = ClockWatch(clock, monotonic)
        self._late_faults: deque[Fault] = deque()
        """Faults noted outside the round thread (overruns), counted by the next round."""
        exposition.publish(self._builder.snapshot())

    def period_now(self) -> float:
        """The period in force: --period, stretched while the measured cost exceeds the budget."""
        return self._overhead.period

    def duty_now(self) -> float:
        return self._config.window / self._overhead.period

    def window_now(self) -> float:
        """The window the agent asks its sources for now (`--adaptive-window` lengthens it)."""
        return self._planner.window if self._planner is not None else self._config.window

    def run(self, sources: Sequence[Source], gpu_properties: dict[int, DeviceProperties] | None = None) -> None:
        """One round over `sources`; `gpu_properties` for the traces that carry none (`--gpu-properties`)."""
        self._note_clock_step()
        self._nvml.begin()
        window = self._planner.next()[0] if self._planner is not None else self._config.window
        windows = self._fanout.capture(
            sources, window, self._config.window, self._config.collect_timeout, on_busy=self._source_busy
        )
        reading = self._nvml.end()
        if (period := note_costs(self._overhead, sources, window=self._config.window)) is not None:
            self._on_period(period)
        while self._late_faults:
            self._builder.add_fault(*self._late_faults.popleft())
        for reason, count in self._nvml.take_errors().items():
            self._builder.add_fault("nvml", reason, count)
        results: list[WindowResult] = []
        for cw in windows:
            if self._stopping():
                cw.done(False)  # abandoned: the source may offer it again
                continue
            result = self.process_window(cw, gpu_properties)
            self._builder.record(result, self._clock())
            results.append(result)
        self._builder.apply_round(results)
        self._adapt_window(results, {s.name for s in sources if s.windows_timed_by == "agent"})
        self.publish_nvml(reading)

    def overrun(self) -> None:
        """A round fell due while this one still ran (the ticker's thread): counted by the next
        round, logged (rate-limited)."""
        self._late_faults.append(("round", "overrun"))
        limited_event(
            log,
            self._repeats,
            ("round_skipped",),
            "round_skipped",
            logging.WARNING,
            reason=f"the previous round is still running after the {self.period_now():g}s period",
        )

    def failed(self, exc: Exception) -> None:
        """A round raised (a bug, not an expected failure): one line (traceback at debug level), counted."""
        error = f"{type(exc).__name__}: {exc}"
        limited_event(
            log,
            self._repeats,
            repeat_key("round_failed", error),
            "round_failed",
            logging.ERROR,
            exc_info=exc,
            error=error,
        )
        try:
            self._builder.record(WindowResult("round", "round", "failed", fault=("round", "unexpected")), self._clock())
            self._exposition.publish(self._builder.snapshot())
        except Exception as exc2:
            event(log, "publish_failed", logging.ERROR, error=str(exc2))

    def _note_clock_step(self) -> None:
        if (step := self._clock_watch.step()) is not None:
            self._builder.add_fault("clock", "jump")
            limited_event(
                log,
                self._repeats,
                ("clock_jump",),
                "clock_jump",
                logging.WARNING,
                seconds=round(step, 3),
                reason="the wall clock was stepped; window timestamps follow it, scheduling and durations do not",
            )

    def _source_busy(self, src: Source) -> None:
        self._builder.add_fault("capture", "skipped_busy")
        limited_event(
            log,
            self._repeats,
            ("source_busy", src.name),
            "source_busy",
            logging.WARNING,
            source=src.name,
            reason="its previous capture has not returned; skipping this round",
        )

    def _adapt_window(self, results: Sequence[WindowResult], agent_timed: Collection[str]) -> None:
        """--adaptive-window: lengthen the window after a round that captured long kernels in the
        windows the agent timed (`agent_timed`: those sources' names; `Source.windows_timed_by`)."""
        longest = max(
            (
                d.longest_kernel / 1e6
                for r in results
                if r.analysis is not None and r.source in agent_timed
                for d in r.analysis.devices
            ),
            default=0.0,
        )
        if self._planner is not None and self._planner.observe(longest):
            event(log, "window_lengthened", window_s=round(self._planner.window, 6), longest_kernel_s=round(longest, 6))

    def publish_nvml(self, reading: NvmlReading) -> None:
        """NVML's reading and devices into the builder, and the snapshot published."""
        self._builder.set_nvml(reading.up, reading.samples(), gpu_infos(self._nvml.gpus))
        self._exposition.publish(self._builder.snapshot())

    def process_window(
        self, cw: CapturedWindow, gpu_properties: dict[int, DeviceProperties] | None = None
    ) -> WindowResult:
        """Open (confined to its folder), read and analyse one window (`window.read_window`), and offer
        it as evidence: a kept window's trace goes to the evidence worker, its id rides on its GPUs'
        counters at once, and its source may delete the trace only once the copy is over."""
        reading = WindowReading(
            self._config.max_trace_bytes, self._memory, gpu_properties, self._stopping, self._repeats
        )
        if self._evidence is None:
            return read_window(cw, reading)
        held: list[bool] = []
        result = read_window(dataclasses.replace(cw, on_done=held.append), reading)

        def release() -> None:
            for processed in held:
                cw.done(processed)

        kid = self._evidence.offer(cw, result.analysis, release)
        if kid is not None and result.analysis is not None:
            self._builder.note_evidence((d.device for d in result.analysis.devices), kid, self._clock())
        return result
