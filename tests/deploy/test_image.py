"""The agent image, built from deploy/Dockerfile and run for real with Debian's podman and buildah.

No image registry is reachable here, so `.ci/build-image` makes the base itself (debootstrap from
the machine's Debian mirror, imported as localhost/debian-py:bookworm) and builds the image on
it with `podman build`. `podman run` is refused in this sandbox (the OCI runtime's setrlimit
fails), so the image's own entrypoint runs through `buildah run --isolation chroot --network host`
as the image's own user: the same filesystem, user, environment and entrypoint, without the
runtime's resource limits. Its filesystem is also read directly (`buildah mount`).

Needs root, podman, buildah and debootstrap (`.ci/run` installs them). Where they are missing the
tests say so: skipped on a developer's machine, FAILED under CI=true.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.patience import hang_guard
from warpwatch import __version__

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("WARPWATCH_IMAGE", "localhost/warpwatch:ci")
AGENT_UID = AGENT_GID = 65532
TRACE_DIR = "/tmp/warpwatch"
SAMPLES_IN_IMAGE = "/opt/warpwatch/samples"
COMPILERS = {"gcc", "g++", "cc", "c++", "clang", "clang++", "tcc", "cpp", "ld", "as", "make", "nvcc"}
pytestmark = pytest.mark.slow


def _cannot(reason: str) -> None:
    """A step that cannot run here: skipped on a developer's machine, a failure in CI."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the image test cannot run: {reason}")
    pytest.skip(reason)


def _run(*argv: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def image() -> str:
    missing = [t for t in ("podman", "buildah", "debootstrap") if shutil.which(t) is None]
    if missing:
        _cannot(f"{', '.join(missing)} not installed (apt-get install podman buildah debootstrap; .ci/run does)")
    if os.geteuid() != 0:
        _cannot("building and mounting images needs root here")
    # Cheap when nothing changed: the debootstrapped base is cached, podman reuses its layers.
    proc = subprocess.run(
        ["bash", str(ROOT / ".ci" / "build-image")],
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "WARPWATCH_IMAGE": IMAGE},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return IMAGE


@pytest.fixture(scope="module")
def config(image: str) -> dict[str, Any]:
    """The image's config, plus what podman keeps beside it (size, HEALTHCHECK, manifest type)."""
    (info,) = json.loads(_run("podman", "image", "inspect", image).stdout)
    return {
        **info["Config"],
        "_size": info["Size"],
        "Healthcheck": info.get("Healthcheck"),
        "_manifest": info.get("ManifestType"),
    }


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[str]:
    name = _run("buildah", "from", "--pull-never", image).stdout.strip().splitlines()[-1]
    try:
        yield name
    finally:
        _run("buildah", "rm", name, check=False)


@pytest.fixture(scope="module")
def rootfs(container: str) -> Iterator[Path]:
    path = Path(_run("buildah", "mount", container).stdout.strip())
    try:
        yield path
    finally:
        _run("buildah", "umount", container, check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _agent_pids(port: int) -> list[int]:
    """The Python processes (on this machine) running the agent's entry point for `port`.

    Not `buildah-chroot-exec`, which holds the same arguments: it is the runtime, not the agent."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            len(argv) > 2
            and os.path.basename(argv[0]).startswith(b"python")
            and argv[1].endswith(b"/warpwatch")
            and argv[2] == b"run"
            and str(port).encode() in argv
        ):
            found.append(int(entry.name))
    return found


def _ids(pid: int) -> tuple[list[int], list[int]]:
    status = Path(f"/proc/{pid}/status").read_text()
    uids = [int(x) for x in re.search(r"^Uid:\s+(.*)$", status, re.M).group(1).split()]  # type: ignore[union-attr]
    gids = [int(x) for x in re.search(r"^Gid:\s+(.*)$", status, re.M).group(1).split()]  # type: ignore[union-attr]
    return uids, gids


def test_the_image_keeps_its_user_entrypoint_port_and_healthcheck(config: dict[str, Any], capsys: Any) -> None:
    assert config["User"] == f"{AGENT_UID}:{AGENT_GID}"
    assert config["Entrypoint"] == ["warpwatch", "run"]
    assert "9946/tcp" in config["ExposedPorts"]
    # --format docker keeps the HEALTHCHECK (OCI images drop it).
    assert "docker" in config["_manifest"]
    assert config["Healthcheck"]["Test"][0] == "CMD" and "/healthz" in config["Healthcheck"]["Test"][-1]
    assert config["Labels"]["org.opencontainers.image.version"] == __version__
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["WARPWATCH_TRACE_DIR"] == TRACE_DIR
    with capsys.disabled():
        print(
            f"\nimage {IMAGE}: {config['_size'] / 1e6:.0f} MB ({config['_size']} bytes), user {config['User']}, "
            f"entrypoint {config['Entrypoint']}, cmd {config.get('Cmd')}"
        )


def test_the_entrypoint_serves_healthz_and_kernel_metrics_of_the_bundled_samples_as_the_image_user(
    config: dict[str, Any], container: str, capsys: Any
) -> None:
    port = _free_port()
    argv = [
        *config["Entrypoint"],
        *(config.get("Cmd") or []),
        "--source",
        f"replay:{SAMPLES_IN_IMAGE}",
        "--address",
        "127.0.0.1",
        "--port",
        str(port),
        "--period",
        "10s",
        "--jitter",
        "0s",
    ]
    proc = subprocess.Popen(
        [
            "buildah",
            "run",
            "--isolation",
            "chroot",
            "--network",
            "host",
            "--user",
            config["User"],
            container,
            "--",
            *argv,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + hang_guard(90)  # /healthz, then the first window: however loaded
        status, body = 0, ""
        while (status, body.strip()) != (200, "ok"):
            assert proc.poll() is None, f"the agent exited {proc.returncode}: {proc.communicate()[0]}"
            assert time.monotonic() < deadline, f"/healthz never answered: {status} {body!r}"
            time.sleep(0.3)
            status, body = _get(f"http://127.0.0.1:{port}/healthz")
        metrics = ""
        # a negative reported minimum is exported at the defaults (the other kernel gauges are opt-in)
        while not re.search(r"^warpwatch_kernel_reported_warps_per_sm_min\{", metrics, re.M):
            assert time.monotonic() < deadline, "no kernel series in /metrics:\n" + metrics[-2000:]
            time.sleep(0.3)
            metrics = _get(f"http://127.0.0.1:{port}/metrics")[1]
        # The image's own HEALTHCHECK command, run inside the image while the agent serves.
        check = subprocess.run(
            [
                "buildah",
                "run",
                "--isolation",
                "chroot",
                "--network",
                "host",
                "--user",
                config["User"],
                "--env",
                f"WARPWATCH_PORT={port}",
                container,
                "--",
                *config["Healthcheck"]["Test"][1:],
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        # Who serves: the agent process itself runs as the image's user, with no capabilities.
        agent = _agent_pids(port)
        assert len(agent) == 1, f"expected one agent process for port {port}, found {agent}"
        for pid in agent:
            assert _ids(pid) == ([AGENT_UID] * 4, [AGENT_GID] * 4)
            cap_eff = re.search(r"^CapEff:\s+(\S+)", Path(f"/proc/{pid}/status").read_text(), re.M)
            assert cap_eff and int(cap_eff.group(1), 16) == 0
        # The first window replays the first sample by name: the bundled reproduction of the
        # PyTorch 1.8/1.9 SM count of -1 (agent/warpwatch/samples/ATTRIBUTION.md).
        kernel_lines = [line for line in metrics.splitlines() if line.startswith("warpwatch_kernel_")]
        reported = [line for line in kernel_lines if line.startswith("warpwatch_kernel_reported_warps_per_sm_min{")]
        assert any(float(line.rsplit(" ", 1)[1]) < 0 for line in reported), reported
        with capsys.disabled():
            print(
                f"\nimage run: agent pid {agent[0]} uid/gid {AGENT_UID}/{AGENT_GID}, no capabilities; "
                f"/healthz {status} {body.strip()!r}; HEALTHCHECK exit 0; first metric lines:"
            )
            shown = [
                line
                for line in metrics.splitlines()
                if re.match(
                    r"warpwatch_(kernel_(warps_per_sm|reported_warps_per_sm_min)\{.*vectorized_elementwise|gpu_busy_ratio"
                    r"|profiler_artifacts_total\{.*sm_count_invalid)",
                    line,
                )
            ]
            for line in shown:
                print("  " + line)
        # SIGTERM to the agent (buildah run does not forward signals): a clean exit.
        for pid in agent:
            os.kill(pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out[-3000:]
        records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        events = [r["event"] for r in records]
        assert events[0] == "starting" and "listening" in events, out[-3000:]
        assert records[0]["compiled"] == "all"  # the agent reads with the compiled modules
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def _writable_by(st: os.stat_result, uid: int, gid: int) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IWUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IWGRP)
    return bool(st.st_mode & stat.S_IWOTH)


def test_nothing_in_the_image_is_writable_by_its_user_but_the_trace_folder(
    rootfs: Path, container: str, config: dict[str, Any]
) -> None:
    # Every file of the image's filesystem, read from outside (root sees every folder). /dev, /proc and
    # /sys are replaced by the runtime: left out.
    writable = []
    for dirpath, dirnames, filenames in os.walk(rootfs):
        rel = "/" + os.path.relpath(dirpath, rootfs).lstrip(".")
        if rel == "/":
            dirnames[:] = [d for d in dirnames if d not in ("dev", "proc", "sys")]
        for name in [*dirnames, *filenames]:
            st = os.lstat(os.path.join(dirpath, name))
            if not stat.S_ISLNK(st.st_mode) and _writable_by(st, AGENT_UID, AGENT_GID):
                writable.append(os.path.join(rel, name).replace("//", "/"))
    assert writable == [TRACE_DIR]
    # The same question asked inside, by the kernel, as the image's user.
    proc = _run(
        "buildah",
        "run",
        "--isolation",
        "chroot",
        "--user",
        config["User"],
        container,
        "--",
        "find",
        "/",
        "-xdev",
        "-writable",
        check=False,
    )
    assert proc.stdout.split() == [TRACE_DIR], proc.stdout + proc.stderr


def test_no_torch_and_no_compiler_in_the_image(rootfs: Path, container: str) -> None:
    site = list(rootfs.glob("opt/warpwatch/venv/lib/python3*/site-packages"))
    assert len(site) == 1
    installed = {p.name.split("-")[0].lower() for p in site[0].glob("*.dist-info")}
    assert "warpwatch" in installed and "prometheus_client" in installed
    assert list(site[0].glob("warpwatch-*.dist-info/licenses/LICENSE"))  # pyproject's license-files
    assert not {"torch", "triton", "nvidia_cuda_runtime_cu12"} & installed, installed
    assert not list(rootfs.glob("**/site-packages/torch"))
    found = []
    for folder in ("usr/bin", "usr/local/bin", "bin", "usr/sbin", "opt/warpwatch/venv/bin"):
        for entry in (rootfs / folder).glob("*"):
            base = re.sub(r"^x86_64-linux-gnu-|-\d+$", "", entry.name)
            if base in COMPILERS:
                found.append(f"/{folder}/{entry.name}")
    assert found == []
    proc = _run(
        "buildah",
        "run",
        "--isolation",
        "chroot",
        container,
        "--",
        "python3",
        "-c",
        "import importlib.util as u; print(u.find_spec('torch') is None)",
    )
    assert proc.stdout.strip() == "True"


def test_the_image_reads_traces_with_the_compiled_scanner(container: str) -> None:
    """The builder stage compiled warpwatch's C extension (and its compiler stayed there: the test
    above); the image's Python loads it, so the agent reads with it (tests/trace/test_gpuscan.py)."""
    proc = _run(
        "buildah",
        "run",
        "--isolation",
        "chroot",
        "--user",
        "65532:65532",
        container,
        "--",
        "/opt/warpwatch/venv/bin/python",
        "-c",
        "from warpwatch.trace import skim, _gpuscan; print(skim.NATIVE, _gpuscan.__file__)",
    )
    native, where = proc.stdout.split()
    assert native == "True" and where.startswith("/opt/warpwatch/venv/lib/"), proc.stdout + proc.stderr
