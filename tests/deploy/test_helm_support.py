"""The chart tests' own helpers (support/helm.py): helm's schema errors read alike from helm 3 and
helm 4, and without helm every chart test skips, saying how to get it. Neither needs helm."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support.helm import SchemaError, schema_errors
from support.paths import ROOT

HELM3_LINT = """==> Linting helm/warpwatch
[ERROR] values.yaml: - kineto.torchVersion: Invalid type. Expected: string, given: number
[ERROR] templates/: values don't meet the specifications of the schema(s) in the following chart(s):
warpwatch:
- kineto.torchVersion: Invalid type. Expected: string, given: number
- kineto.allowAffectedTorch: Invalid type. Expected: boolean, given: integer
- kineto.version: Does not match pattern '^$|^v?[0-9]+\\.[0-9]+$'
- warpwatch.sidecarMode: warpwatch.sidecarMode must be one of the following: "auto", "native", "regular"
- warpwatch: Additional property nativeSidecar is not allowed
- (root): Additional property extra is not allowed
- warpwatch.config.top_kernels: Must be greater than or equal to 1
- warpwatch.config.source: Must validate one and only one schema (oneOf)

Error: 1 chart(s) linted, 1 chart(s) failed
"""
HELM4_LINT = """==> Linting helm/warpwatch
[ERROR] values.yaml: - at '/kineto/torchVersion': got number, want string
[ERROR] templates/: values don't meet the specifications of the schema(s) in the following chart(s):
warpwatch:
- at '/kineto/torchVersion': got number, want string
- at '/kineto/allowAffectedTorch': got number, want boolean
- at '/kineto/version': 'latest' does not match pattern '^$|^v?[0-9]+\\\\.[0-9]+$'
- at '/warpwatch/sidecarMode': value must be one of 'auto', 'native', 'regular'
- at '/warpwatch': additional properties 'nativeSidecar' not allowed
- at '': additional properties 'extra' not allowed
- at '/warpwatch/config/top_kernels': minimum: got 0, want 1
- at '/warpwatch/config/source': 'oneOf' failed, none matched
  - at '/warpwatch/config/source': got array, want null

Error: 1 chart(s) linted, 1 chart(s) failed
"""


def test_schema_errors_are_read_alike_from_helm_3_and_helm_4() -> None:
    expected = {
        SchemaError("kineto.torchVersion", "type", "string"),
        SchemaError("kineto.allowAffectedTorch", "type", "boolean"),
        SchemaError("kineto.version", "pattern"),
        SchemaError("warpwatch.sidecarMode", "enum"),
        SchemaError("warpwatch.nativeSidecar", "additional"),
        SchemaError("extra", "additional"),
        SchemaError("warpwatch.config.top_kernels", "minimum"),
        SchemaError("warpwatch.config.source", "oneOf"),
    }
    assert schema_errors(HELM3_LINT) == expected
    assert schema_errors(HELM4_LINT) == expected | {SchemaError("warpwatch.config.source", "type", "null")}


def test_helm_4_names_every_additional_property() -> None:
    text = "- at '/example': additional properties 'gpus', 'cpu' not allowed\n"
    assert schema_errors(text) == {SchemaError("example.gpus", "additional"), SchemaError("example.cpu", "additional")}


@pytest.mark.slow  # a pytest of its own, about 2 s
def test_without_helm_the_chart_tests_skip_and_say_how_to_get_it() -> None:
    modules = [
        "tests/deploy/test_helm.py",
        "tests/deploy/test_helm_objects.py",
        "tests/deploy/test_helm_sidecar.py",
        "tests/deploy/test_readme_kubernetes.py",
    ]
    env = {**os.environ, "WARPWATCH_HELM": str(ROOT / "no-such-helm")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *modules],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0 and "skipped" in summary, proc.stdout + proc.stderr
    assert "passed" not in summary and "failed" not in summary and "error" not in summary, summary
    assert f"helm not found: WARPWATCH_HELM='{ROOT / 'no-such-helm'}' is no executable file" in proc.stdout
