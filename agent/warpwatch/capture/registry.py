"""`--source SPEC` -> a `Source`. The one place that knows every spec prefix.

- `dir:PATH`: finished trace files dropped into a folder (`dirsource.DirSource`);
- `replay:PATH`: a file or folder of traces replayed in a loop (`replay.ReplaySource`); `replay:@samples`
  replays the real traces bundled with the package;
- `kineto-daemon[:socket_dir=PATH]`: unmodified PyTorch processes started with
  `KINETO_USE_DAEMON=1` (`daemon.KinetoDaemonSource`), traces written under `trace_dir`;
- `vllm:URL[,dir=PATH][,token_env=VAR][,expected_files=N][,max_steps=N]`: a vLLM server's
  `/start_profile` and `/stop_profile` (`vllm_source`); `dir` is its profiler folder as the
  agent sees it (default `trace_dir`); `max_steps`: engine steps a worker records per window
  before it stops by itself (vLLM 0.32+; 0: the whole window);
- `sglang:URL[,dir=PATH][,server_dir=PATH][,token_env=VAR][,expected_files=N][,profiler_dir_env=1]
  [,num_steps=N]`: the same for SGLang (`sglang_source`); `server_dir` is the folder as the
  server sees it; `profiler_dir_env=1` says the server has `SGLANG_TORCH_PROFILER_DIR` (SGLang
  before 0.4.4 dies without it); `num_steps`: steps per stage of a 0.4.7+ by-stage profile.

Sources with their own modules are imported only when a spec names them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.table import Config
from ..errors import ConfigError
from . import Source

if TYPE_CHECKING:
    from .servers import ProfilingServerSource

SAMPLES_ALIAS = "@samples"
SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"
"""`replay:@samples` replays the real traces bundled with the package (a demo that needs no GPU)."""

PREFIXES = ("dir:", "replay:", "kineto-daemon", "vllm:", "sglang:")
EXAMPLES = "dir:/var/run/traces, replay:trace.json.gz, kineto-daemon, vllm:http://localhost:8000,dir=/traces"


def _options(spec: str, text: str, allowed: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise ConfigError(
                f"source {spec!r}: unknown option {item!r}; options are " + ", ".join(f"{a}=..." for a in allowed)
            )
        out[key] = value.strip()
    return out


def _int_option(spec: str, opts: Mapping[str, str], key: str) -> int | None:
    if key not in opts:
        return None
    try:
        return int(opts[key])
    except ValueError:
        raise ConfigError(f"source {spec!r}: {key} must be an integer, got {opts[key]!r}") from None


def build_source(spec: str, config: Config) -> Source:
    """Build the source a `--source` spec names; ConfigError for an unknown or malformed spec."""
    spec = spec.strip()
    if spec.startswith("dir:"):
        return _dir_source(spec, config)
    if spec.startswith("replay:"):
        return _replay_source(spec)
    if spec == "kineto-daemon" or spec.startswith("kineto-daemon:"):
        return _daemon_source(spec, config)
    for prefix in ("vllm:", "sglang:"):
        if spec.startswith(prefix):
            return _server_source(spec, prefix, config)
    raise ConfigError(f"source {spec!r}: unknown kind of source; use one of {', '.join(PREFIXES)} (e.g. {EXAMPLES})")


def _dir_source(spec: str, config: Config) -> Source:
    from .dirsource import DirSource

    path = spec[len("dir:") :]
    if not path:
        raise ConfigError(f"source {spec!r}: dir: needs a folder, e.g. dir:/var/run/traces")
    return DirSource(
        Path(path),
        name=spec,
        delete_processed=config.delete_processed,
        retention_files=config.retention_files,
        retention_bytes=config.retention_bytes,
        give_up_s=max(config.collect_timeout, config.window),
    )


def _replay_source(spec: str) -> Source:
    from .replay import ReplaySource

    path = spec[len("replay:") :]
    if not path:
        raise ConfigError(f"source {spec!r}: replay: needs a trace file or folder (or @samples)")
    if path == SAMPLES_ALIAS:
        return ReplaySource(SAMPLES_DIR, name=spec)
    return ReplaySource(Path(path), name=spec)


def _daemon_source(spec: str, config: Config) -> Source:
    # Implemented in warpwatch.capture.daemon (zero-code attach through Kineto's daemon protocol).
    from .daemon import KinetoDaemonSource

    opts = _options(spec, spec[len("kineto-daemon:") :] if ":" in spec else "", ("socket_dir",))
    return KinetoDaemonSource(
        config.trace_dir.absolute(),
        socket_dir=opts.get("socket_dir"),
        delete_processed=True,
        name=spec,
    )


def vllm_source(
    url: str, trace_dir: str | os.PathLike[str], *, max_steps: int | None = None, **options: Any
) -> ProfilingServerSource:
    """Windows from a vLLM server's `POST /start_profile` and `POST /stop_profile`: the server
    source with vLLM's dialect (`servers.vllm.VllmDialect`: the labels, `trace_dir`, `max_steps`,
    default `DEFAULT_MAX_STEPS`). `options`: the other `servers.ServerOptions` settings."""
    from .servers import ProfilingServerSource, ServerOptions, VllmDialect
    from .servers.vllm import DEFAULT_MAX_STEPS

    dialect = VllmDialect(trace_dir, DEFAULT_MAX_STEPS if max_steps is None else max_steps)
    return ProfilingServerSource(ServerOptions.of(VllmDialect.kind, url, trace_dir, **options), dialect)


def sglang_source(
    url: str,
    trace_dir: str | os.PathLike[str],
    *,
    server_trace_dir: str | None = None,
    activities: Sequence[str] = ("GPU",),
    with_stack: bool = False,
    record_shapes: bool = False,
    profiler_dir_env: bool = False,
    num_steps: int | None = None,
    **options: Any,
) -> ProfilingServerSource:
    """Windows from an SGLang server's `POST /start_profile` (and, before 0.4.7, `/stop_profile`):
    the server source with SGLang's dialect (`servers.sglang.SglangDialect`: the labels and the
    settings). `trace_dir` is the folder as the agent sees it, `server_trace_dir` as the server
    does (default: `trace_dir`); `num_steps` defaults to `DEFAULT_NUM_STEPS`. `options`: the other
    `servers.ServerOptions` settings."""
    from .servers import ProfilingServerSource, ServerOptions, SglangDialect
    from .servers.sglang import DEFAULT_NUM_STEPS

    settings = ServerOptions.of(SglangDialect.kind, url, trace_dir, **options)
    dialect = SglangDialect(
        server_trace_dir or str(settings.trace_dir),
        activities,
        with_stack,
        record_shapes,
        profiler_dir_env,
        DEFAULT_NUM_STEPS if num_steps is None else num_steps,
    )
    return ProfilingServerSource(settings, dialect)


def _server_source(spec: str, prefix: str, config: Config) -> Source:
    # Implemented in warpwatch.capture.servers (the servers' own profiling endpoints).
    from .servers import DEFAULT_TOKEN_ENV

    url, _, rest = spec[len(prefix) :].partition(",")
    if not url:
        raise ConfigError(f"source {spec!r}: {prefix} needs a URL, e.g. {prefix}http://localhost:8000,dir=/traces")
    allowed = ("dir", "token_env", "expected_files") + (
        ("server_dir", "profiler_dir_env", "num_steps") if prefix == "sglang:" else ("max_steps",)
    )
    opts = _options(spec, rest, allowed)
    trace_dir = Path(opts.get("dir") or config.trace_dir)
    token_env = opts.get("token_env") or DEFAULT_TOKEN_ENV
    expected = _int_option(spec, opts, "expected_files")
    if prefix == "vllm:":
        return vllm_source(
            url,
            trace_dir,
            name=spec,
            delete_processed=config.delete_processed,
            token_env=token_env,
            expected_files=expected,
            max_steps=_int_option(spec, opts, "max_steps"),
        )
    env = opts.get("profiler_dir_env", "0").lower()
    if env not in ("0", "1", "true", "false", "yes", "no"):
        raise ConfigError(f"source {spec!r}: profiler_dir_env must be 1 or 0, got {opts['profiler_dir_env']!r}")
    return sglang_source(
        url,
        trace_dir,
        server_trace_dir=opts.get("server_dir"),
        name=spec,
        delete_processed=config.delete_processed,
        token_env=token_env,
        expected_files=expected,
        profiler_dir_env=env in ("1", "true", "yes"),
        num_steps=_int_option(spec, opts, "num_steps"),
    )
