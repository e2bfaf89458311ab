"""The agent's own operational metrics (`AGENT`): the HTTP port, the kineto-daemon and server
sources, what watching costs the server, the evidence store. Rendered at each scrape next to
process_* (not part of the window snapshot, so not in `ALL`, which the snapshot collector and the
dashboards cover)."""

from __future__ import annotations

from .definition import MetricDef

HTTP_CONNECTIONS = MetricDef("warpwatch_http_connections", "gauge", "HTTP connections open on the metrics port now.")
HTTP_REJECTED = MetricDef(
    "warpwatch_http_rejected",
    "counter",
    "Connections and requests the metrics port refused or closed early, by reason (too_many_connections, "
    "evicted, header_timeout, headers_too_large, auth_busy, slow_reader, client_gone, tls_failed, "
    "accept_failed, bad_request, not_found).",
    ("reason",),
)
DAEMON_CLIENTS = MetricDef(
    "warpwatch_daemon_clients",
    "gauge",
    "Kineto clients (traced processes) registered with a kineto-daemon source now.",
    ("source",),
)
DAEMON_CLIENTS_SEEN = MetricDef(
    "warpwatch_daemon_clients_seen",
    "counter",
    "Kineto clients that registered with a kineto-daemon source (new sender addresses).",
    ("source",),
)
DAEMON_DATAGRAMS_DROPPED = MetricDef(
    "warpwatch_daemon_datagrams_dropped",
    "counter",
    "Datagrams a kineto-daemon source dropped unanswered, by reason (malformed: not a well-formed Kineto message).",
    ("source", "reason"),
)
DAEMON_REPLIES_DROPPED = MetricDef(
    "warpwatch_daemon_replies_dropped",
    "counter",
    "Replies a kineto-daemon source did not send, by reason (stale: the request was older than the client "
    "waits, a late reply would put it one poll behind for good; send_failed: the client's queue or the "
    "socket's send buffer was full, or the client was gone; unsafe_address: the client spells "
    "KINETO_IPC_SOCKET_DIR differently and its Kineto would abort on a reply).",
    ("source", "reason"),
)
DAEMON_CLIENTS_EVICTED = MetricDef(
    "warpwatch_daemon_clients_evicted",
    "counter",
    "Kineto clients a kineto-daemon source dropped from its registry, by reason (registry_full: to make "
    "room for a new sender; undeliverable: replies to it kept failing).",
    ("source", "reason"),
)
DAEMON_CLIENT_EXITS = MetricDef(
    "warpwatch_daemon_client_exits_during_window",
    "counter",
    "Kineto clients of a kineto-daemon source that exited (went silent) while a window they had been "
    "configured for was open; Kineto may crash at exit then (docs/overhead.md).",
    ("source",),
)
SERVER_WINDOWS_SKIPPED = MetricDef(
    "warpwatch_server_windows_skipped",
    "counter",
    "Windows a vllm/sglang source did not open, by reason (unsafe_request: the server's version cannot be "
    "profiled without risk to it; profile_in_use: someone else's profile is running; previous_flush_pending: "
    "the last window's traces are still being written or its stop is unanswered; session_pending: a "
    "step-bounded profile is still waiting for requests).",
    ("source", "reason"),
)
SERVER_TRACE_FILES = MetricDef(
    "warpwatch_server_trace_files",
    "counter",
    "Trace files a vllm/sglang source found, by kind (worker: handed over in its window; late: handed over "
    "after its window timed out; cpu_only: the server front end's CPU trace, deleted unread; abandoned: "
    "never completed, given up; leftover: an earlier run's session, written after that agent exited, deleted unread).",
    ("source", "kind"),
)

# -- What watching costs the server (docs/overhead.md)
CAPTURE_STOP = MetricDef(
    "warpwatch_capture_stop_seconds",
    "histogram",
    "Seconds from asking a source to end a window until it answered: the time the traced process spent "
    "ending its profile and writing the trace (a vllm/sglang server may serve nothing meanwhile).",
    ("source",),
    unit="seconds",
)
SERVED_SLOWDOWN = MetricDef(
    "warpwatch_served_slowdown_ratio",
    "gauge",
    "Mean wait per output token the server reported (inter-token gaps and first-token waits) inside "
    "capture windows (their stop included) divided by the mean outside them, minus 1, over the last "
    "rounds (vllm/sglang sources; absent until known).",
    ("source",),
)
OVERHEAD = MetricDef(
    "warpwatch_overhead_ratio",
    "gauge",
    "Estimated share of the traced server's time the agent costs at the current period: measured "
    "slowdown x window / period + stop stall / period, the largest over the sources (absent until a "
    "window was measured).",
)
OVERHEAD_BUDGET = MetricDef(
    "warpwatch_overhead_budget_ratio",
    "gauge",
    "The share of the server's time the agent may cost (--overhead-budget); above it the period is stretched.",
)

# -- The evidence store (--evidence-dir; docs/dashboards.md, "From an alert to its trace")
EVIDENCE_KEPT = MetricDef(
    "warpwatch_evidence_kept",
    "counter",
    "Windows whose trace was kept in --evidence-dir, by reason (artifact, degraded, low_confidence, baseline).",
    ("reason",),
)
EVIDENCE_FAILED = MetricDef(
    "warpwatch_evidence_failed",
    "counter",
    "Windows the rule chose whose trace could not be kept, by reason (io_error: the folder refused it, "
    "e.g. a full disk; too_large: larger than --evidence-bytes compressed; queue_full: too many windows "
    "were waiting to be kept; shutdown: the agent stopped first).",
    ("reason",),
)
EVIDENCE_BYTES = MetricDef(
    "warpwatch_evidence_bytes",
    "gauge",
    "Bytes kept in --evidence-dir now (traces and their JSON), at most --evidence-bytes.",
    unit="bytes",
)
EVIDENCE_FILES = MetricDef(
    "warpwatch_evidence_windows", "gauge", "Windows kept in --evidence-dir now, at most --evidence-files."
)

AGENT: tuple[MetricDef, ...] = (
    HTTP_CONNECTIONS,
    HTTP_REJECTED,
    DAEMON_CLIENTS,
    DAEMON_CLIENTS_SEEN,
    DAEMON_DATAGRAMS_DROPPED,
    DAEMON_REPLIES_DROPPED,
    DAEMON_CLIENTS_EVICTED,
    DAEMON_CLIENT_EXITS,
    SERVER_WINDOWS_SKIPPED,
    SERVER_TRACE_FILES,
    CAPTURE_STOP,
    SERVED_SLOWDOWN,
    OVERHEAD,
    OVERHEAD_BUDGET,
    EVIDENCE_KEPT,
    EVIDENCE_FAILED,
    EVIDENCE_BYTES,
    EVIDENCE_FILES,
)
