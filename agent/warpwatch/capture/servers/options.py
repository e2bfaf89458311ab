"""The settings of a profiling-server source (`ServerOptions`), checked once when they are made."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ...config.units import check_count, check_seconds
from ...errors import ConfigError
from .clock import WindowClock

DEFAULT_TOKEN_ENV = "WARPWATCH_SERVER_TOKEN"

_SECONDS = (
    "request_timeout_s",
    "flush_timeout_s",
    "backoff_s",
    "max_backoff_s",
    "poll_interval_s",
    "late_timeout_s",
    "settle_quiet_s",
)


@dataclass(frozen=True)
class ServerOptions:
    """What a profiling-server source is given (see `base` for what each setting does).

    `kind` is the engine (its dialect's `Dialect.kind`): it starts each error message and the
    default `name`.
    `url` is kept without surrounding blanks and trailing slashes; seconds are kept as floats.
    """

    kind: str
    url: str
    trace_dir: Path
    name: str | None = None
    delete_processed: bool = False
    token_env: str = DEFAULT_TOKEN_ENV
    request_timeout_s: float = 10.0
    flush_timeout_s: float = 60.0
    max_retries: int = 2
    retry_pause_s: float = 1.0
    backoff_s: float = 60.0
    max_backoff_s: float = 3600.0
    poll_interval_s: float = 0.5
    expected_files: int | None = None
    late_timeout_s: float = 900.0
    settle_quiet_s: float = 5.0
    clock: WindowClock = field(default_factory=WindowClock, compare=False, repr=False)
    """What the seconds above are measured on (`clock`; tests give one that ignores load)."""

    def __post_init__(self) -> None:
        prefix = f"{self.kind} source: "
        url = self.url.strip()
        if not re.match(r"^https?://[^/\s]+", url):
            raise ConfigError(f"{prefix}url must start with http:// or https://, got {url!r}")
        for setting in _SECONDS:
            check_seconds(getattr(self, setting), setting, prefix=prefix)
        check_seconds(self.retry_pause_s, "retry_pause_s", zero=True, prefix=prefix)
        check_count(self.max_retries, "max_retries", least=0, prefix=prefix)
        if self.expected_files is not None:
            check_count(self.expected_files, "expected_files", prefix=prefix)
        if not self.token_env:
            raise ConfigError(f"{prefix}token_env must name an environment variable")
        url = url.rstrip("/")
        self._set(
            url=url,
            name=self.name or f"{self.kind}:{url}",
            trace_dir=Path(self.trace_dir),
            max_retries=int(self.max_retries),
            retry_pause_s=float(self.retry_pause_s),
            **{setting: float(getattr(self, setting)) for setting in _SECONDS},
        )

    def _set(self, **values: object) -> None:
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @property
    def label(self) -> str:
        """The source's name (`name`, else `kind:url`)."""
        assert self.name is not None
        return self.name

    @classmethod
    def of(cls, kind: str, url: str, trace_dir: str | os.PathLike[str], **options: object) -> ServerOptions:
        """The options of a `kind` source: `url`, `trace_dir` and the keyword settings above."""
        return cls(kind, url, Path(trace_dir), **options)  # type: ignore[arg-type]
