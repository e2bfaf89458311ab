"""The compose stack, the image's command and HEALTHCHECK run for real (the installed agent instead of
the image), and the generated copies of `warpwatch.dashboards.deploysync`."""

from __future__ import annotations

import ast
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.deploykit import (
    AGENT_UID,
    DASHBOARDS,
    DEFAULT_PORT,
    DEPLOY,
    ENV_NAMES,
    ROOT,
    Stage,
    exec_form,
)
from support.patience import hang_guard
from warpwatch import __version__
from warpwatch.config.load import load_config
from warpwatch.dashboards import deploysync

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
    compose: dict[str, Any],
) -> None:
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
        DASHBOARDS / "provisioning" / "datasources" / "warpwatch.yaml"
    )
    assert mounted["/etc/grafana/provisioning/alerting/warpwatch.yaml"] == (
        DASHBOARDS / "alerts" / "grafana-alerting.yaml"
    )
    provider_file = mounted["/etc/grafana/provisioning/dashboards/warpwatch.yaml"]
    assert provider_file == DASHBOARDS / "provisioning" / "dashboards" / "warpwatch.yaml"
    # The dashboard provider reads the folder where the dashboards are mounted...
    (provider,) = yaml.safe_load(provider_file.read_text(encoding="utf-8"))["providers"]
    assert mounted[provider["options"]["path"]] == DASHBOARDS
    assert list(DASHBOARDS.glob("*.json"))
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (DASHBOARDS / Path(home).relative_to(provider["options"]["path"])).is_file()
    # ...and the data source is the compose Prometheus.
    (datasource,) = yaml.safe_load(
        mounted["/etc/grafana/provisioning/datasources/warpwatch.yaml"].read_text(encoding="utf-8")
    )["datasources"]
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


@pytest.mark.slow
def test_the_image_command_serves_and_its_healthcheck_passes(final: Stage, tmp_path: Path) -> None:
    warpwatch = Path(sys.executable).parent / "warpwatch"
    if not warpwatch.is_file():
        pytest.skip(f"{warpwatch} not installed (pip install -e .)")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_")}
    env.update({k: v for k, v in final.env().items() if k.startswith(("WARPWATCH_", "PYTHON"))})
    env.update(
        WARPWATCH_PORT=str(port),
        WARPWATCH_ADDRESS="127.0.0.1",
        WARPWATCH_PERIOD="20s",
        WARPWATCH_JITTER="0s",
        WARPWATCH_TRACE_DIR=str(tmp_path),
        WARPWATCH_SOURCE=f"replay:{ROOT / 'agent' / 'warpwatch' / 'samples'}",
    )
    argv = exec_form(final.all("ENTRYPOINT")[0]) + exec_form(final.all("CMD")[0])
    argv[0] = str(warpwatch)
    healthcheck = exec_form(final.all("HEALTHCHECK")[0].partition(" CMD ")[2])
    healthcheck[0] = sys.executable
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + hang_guard()
        while True:  # until the image's own health check passes
            check = subprocess.run(healthcheck, env=env, capture_output=True, text=True, timeout=hang_guard())
            if check.returncode == 0:
                break
            assert proc.poll() is None, f"the agent exited: {proc.communicate()[0]}"
            assert time.monotonic() < deadline, check.stderr
            time.sleep(0.2)
        import urllib.request

        deadline = time.monotonic() + hang_guard()
        while True:  # until the replayed samples' first window is on /metrics
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=hang_guard()) as response:
                body = response.read().decode()
            if "warpwatch_kernel" in body or time.monotonic() > deadline:
                break
            assert proc.poll() is None, f"the agent exited: {proc.communicate()[0]}"
            time.sleep(0.5)
        assert "warpwatch_build_info" in body
        assert "warpwatch_kernel" in body, "no kernel metrics from the replayed samples"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=hang_guard()) as response:
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
# warpwatch.dashboards.deploysync


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
    assert written == [
        chart_files / "dashboards" / "a.json",
        chart_files / "dashboards" / "b.json",
        chart_files / "alerts" / "warpwatch-rules.yaml",
    ]
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
    with pytest.raises(
        deploysync.DeploySyncError,
        match=r"no dashboards/\*\.json under .*: run `warpwatch "
        r"dashboards build` first",
    ):
        deploysync.sync(tmp_path)
    (problem,) = deploysync.check(tmp_path)
    assert "run `warpwatch dashboards build` first" in problem
