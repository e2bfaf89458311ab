"""The compiled modules, `warpwatch.trace._gpuscan` (the trace reader's hot path) and
`warpwatch.analysis._windowmath` (the analysis's per-launch loops); everything else is in pyproject.toml.

Optional: without a C compiler the package installs without it and reads traces in pure Python
(the same results, slower: benchmarks/README.md). WARPWATCH_REQUIRE_NATIVE=1 makes a failed build
an error instead (CI and the image set it, so that a broken build is never shipped silently)."""

import os

from setuptools import Extension, setup

REQUIRED = os.environ.get("WARPWATCH_REQUIRE_NATIVE", "") == "1"
# No FMA contraction: the floats of _windowmath.c are those of its Python twin on every architecture.
FLAGS = ["-O2", "-std=c11", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"]


def extension(name: str, source: str, headers: tuple[str, ...] = ()) -> Extension:
    # `depends`: a changed header rebuilds the module, and the sdist carries it
    return Extension(
        name,
        [source],
        depends=list(headers),
        extra_compile_args=FLAGS,
        define_macros=[("_GNU_SOURCE", "1")],
        optional=not REQUIRED,
    )


setup(
    ext_modules=[
        extension(
            "warpwatch.trace._gpuscan",
            "agent/warpwatch/trace/_gpuscan.c",
            (
                "agent/warpwatch/trace/_gpuscan_json.h",
                "agent/warpwatch/trace/_gpuscan_structure.h",
                "agent/warpwatch/trace/_gpuscan_event.h",
            ),
        ),
        extension("warpwatch.analysis._windowmath", "agent/warpwatch/analysis/_windowmath.c"),
    ]
)
