"""Zero-code attach: answer Kineto's daemon protocol in place of dynolog.

A PyTorch process started with ``KINETO_USE_DAEMON=1`` registers with a local daemon at
``import torch`` and then asks it for work every ``ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS``
(5 s by default; settable only in the base config file named by ``KINETO_CONFIG``).
`KinetoDaemonSource` binds the daemon's socket, keeps a registry of those clients and, when
the service asks for a window, answers each ready client's next poll with an on-demand trace
config. Kineto then writes the trace into ``trace_dir`` by itself; nothing in the traced
process has to change.

The protocol, and what in libkineto makes a reply harmful, is in `wire`; the registry of
clients in `clients`; the socket in `sockets`; the serving thread, which answers only when the
answer cannot harm the client, in `serve`; a window's bookkeeping in `window`; trace files in
`files`; the `Source` over them in `source`.

Paths: ``trace_dir`` is written by the *traced* process, so it must be the same path in both
containers (a shared volume mounted at one path). Kineto from June 2026 on accepts an
on-demand output path only under ``/tmp/`` or ``$KINETO_ONDEMAND_TRACE_DIR`` of the traced
process and otherwise writes ``/tmp/libkineto_activities_<pid>.json`` there, where warpwatch
cannot see it; torch 2.13's bundled Kineto does not enforce this (verified: a trace dir
outside ``/tmp`` worked). Mount the shared volume under ``/tmp/`` (or set
``KINETO_ONDEMAND_TRACE_DIR`` to it in the traced container) to work with both.
"""

from .clients import DaemonClient
from .source import KinetoDaemonSource
from .wire import (
    ABSTRACT_ADDRESS,
    HEADER,
    MalformedDatagram,
    build_config,
    encode_message,
    parse_datagram,
    parse_request,
)

__all__ = [
    "ABSTRACT_ADDRESS",
    "HEADER",
    "DaemonClient",
    "KinetoDaemonSource",
    "MalformedDatagram",
    "build_config",
    "encode_message",
    "parse_datagram",
    "parse_request",
]
