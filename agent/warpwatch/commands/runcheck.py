"""The sources of `warpwatch run`, built from their specs with errors that name the spec as the user
gave it, and `warpwatch run --check`: the settings, the sources and the files they name checked,
and nothing started (no HTTP server, no capture).

What `--check` refuses beyond what `run` refuses at start: a `dir:` folder that does not exist
(`run` waits for it to appear; a check says so, as it is most often a wrong path). A server's
trace folder may be missing (the server creates it with its first trace), and the Kineto daemon's
is created by the agent; each of these, when it exists, must be a folder the agent can read.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..capture import Source
from ..capture.folders import check_start_folder
from ..config.load import Origin
from ..config.table import Config
from ..errors import CaptureError, ConfigError, TraceError


def build_sources(config: Config, origins: Mapping[str, Origin]) -> list[Source]:
    """One `Source` per `--source` spec; a spec that names none is a ConfigError that starts with the
    spec as the user gave it (`--source nfs:/x`, `WARPWATCH_SOURCE=...`, `source: ... (in FILE)`)."""
    from ..capture.registry import build_source

    sources = []
    for spec in config.source:
        try:
            sources.append(build_source(spec, config))
        except ConfigError as exc:
            raise ConfigError(_reworded(origins, spec, str(exc))) from None
    return sources


def _reworded(origins: Mapping[str, Origin], spec: str, message: str, name: str = "") -> str:
    """`message` about `spec` (the source `name`d so), started by the spec as the user gave it instead
    of by the spec or the name alone."""
    origin = origins.get("source")
    if origin is None:
        return message
    for prefix in (f"source {spec.strip()!r}: ", f"{spec.strip()}: ", f"{name}: "):
        message = message.removeprefix(prefix)
    return f"{origin.part(spec)}: {message}"


def check(config: Config, origins: Mapping[str, Origin], sources: list[Source]) -> str:
    """Check what `run` would start with, start nothing; the one-line summary, or a ConfigError."""
    from ..capture.dirsource import DirSource
    from ..capture.replay import ReplaySource

    for spec, source in zip(config.source, sources, strict=True):
        trace_dir = getattr(source, "trace_dir", None)  # (the servers' and the Kineto daemon's)
        try:
            if isinstance(source, DirSource):
                if not check_start_folder(source.name, source.folder):
                    raise CaptureError(f"{source.name}: folder {source.folder} does not exist")
            elif isinstance(source, ReplaySource):
                source.start()  # (lists the traces, opens nothing)
            elif isinstance(trace_dir, Path):
                check_start_folder(source.name, trace_dir, "trace folder")
        except CaptureError as exc:
            raise ConfigError(_reworded(origins, spec, str(exc), source.name)) from None
    _check_files(config, origins)
    plural = "s" if len(sources) != 1 else ""
    return (
        f"warpwatch run --check: ok: {len(sources)} source{plural} ({', '.join(config.source)}); "
        f"a {config.window:g}s window every {config.period:g}s; HTTP on {config.address}:{config.port} "
        "(nothing started)"
    )


def _check_files(config: Config, origins: Mapping[str, Origin]) -> None:
    """The files the settings name, read as `run` reads them at start."""
    from ..serving.webfile import load_web_config
    from ..trace import load_gpu_properties

    if config.web_config is not None:
        load_web_config(config.web_config)  # (a ConfigError naming the file and the key)
    if config.gpu_properties is not None:
        try:
            load_gpu_properties(config.gpu_properties)
        except TraceError as exc:
            where = origins.get("gpu_properties")
            raise ConfigError(f"{where}: {exc.reason}" if where else str(exc)) from None
