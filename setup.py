"""The one compiled module, `warpwatch.trace._gpuscan` (the trace reader's hot path); everything
else is in pyproject.toml.

Optional: without a C compiler the package installs without it and reads traces in pure Python
(the same results, slower: benchmarks/README.md). WARPWATCH_REQUIRE_NATIVE=1 makes a failed build
an error instead (CI and the image set it, so that a broken build is never shipped silently)."""

import os

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "warpwatch.trace._gpuscan",
            ["agent/warpwatch/trace/_gpuscan.c"],
            # No FMA contraction: the same floats on every architecture.
            extra_compile_args=["-O2", "-std=c11", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"],
            define_macros=[("_GNU_SOURCE", "1")],
            optional=os.environ.get("WARPWATCH_REQUIRE_NATIVE", "") != "1",
        )
    ]
)
