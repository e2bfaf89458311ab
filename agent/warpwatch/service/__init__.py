"""The long-running agent (`warpwatch run`): the one place that wires capture -> trace -> analysis -> export.

`agent.Service` runs it (startup, rounds, shutdown), `startup` builds its pieces whole (the one
place that wires them), `rounds` is what one round does, `fanout` runs the sources' captures side
by side, `reading` turns one captured window into a result, `keeping` keeps the windows that matter as
evidence, `exposition` renders /metrics, `readiness` answers /readyz, `clockwatch` notices steps of
the wall clock, `ticker` schedules the rounds, `windowplan` sizes adaptive windows, `signals` stops
it cleanly.

    Service(config).run()  =  startup() -> wait for SIGTERM/SIGINT -> shutdown()

- startup: build (unless given) and start the sources (`capture.registry`), start NVML
  (optional), bind the HTTP server, start the scheduler (`Ticker`, APScheduler 3): a round every `period` plus a random
  0..`jitter`, the first one at once, never two at once (a round still running when the next is
  due makes that one skip, counted as an overrun). A watchdog reschedules on a step of the wall
  clock (NTP, a VM resumed), which APScheduler alone would let stop rounds.
- each round (`run_round`, in its own daemon thread, off the scrape path): NVML sample, every
  source's `capture(window, collect_timeout)` (sources side by side), NVML sample; then every
  `CapturedWindow` is opened inside its folder (`capture.confine`: no link out of it, no FIFO,
  device or other user's file), read and analysed, counted by outcome (ok, empty = no kernel
  launches, failed, timed_out), logged in one line and released with `done()`; the round's
  analyses are merged into a new `Snapshot` that replaces the old one in one reference swap. A
  failing window changes no gauge, and no exception leaves a round (it is logged and counted).
- faults: every failed or timed-out window, NVML error, clock step and overrun round is counted
  in `warpwatch_errors_total{stage,reason}` (`model.FAULTS`); a fault that repeats every round
  is logged once, then at most every ten minutes with the number of repeats (`logs.RepeatFilter`).
  The wall clock (`clock`) only stamps `warpwatch_last_window_timestamp_seconds`; every duration
  and age (readiness) comes from the monotonic clock.
- HTTP: `/metrics` (Prometheus text or OpenMetrics, by the scraper's Accept header, gzip
  when accepted), `/healthz` (200 while the process serves), `/readyz` (200 until the first
  round is overdue and afterwards while rounds keep finishing on time; 503 with the reason
  otherwise, and while shutting down).
- shutdown: the round in progress gets `window + 5 s` (`shutdown_grace_s`) to finish, then its sources are closed
  (abandoning it), each given what is left of that time for what it still has in flight
  (`Source.finish`); the HTTP server stops; exit status 0.
"""
