"""The release (issue 47): one version everywhere, and what a release publishes made here and sent
through a real OCI registry and back.

The version is written once, `__version__` in agent/warpwatch/__init__.py. pyproject.toml reads it
(`[tool.setuptools.dynamic]`), `.ci/package-version` prints it for the scripts (.ci/build-image
passes it as the image's `VERSION` build argument: its tag and `org.opencontainers.image.version`),
and the chart's `version` and `appVersion` must say the same: the first tests prove they agree.

The rest is what `.ci/release-check` runs (it runs this file, and .ci/run's main pytest run leaves it
out so that it runs once): `python -m build` the sdist and wheel, `twine check --strict`, the
wheel (not editable) in a fresh venv running the README's quick start; then a real registry
(Debian's `docker-registry`, distribution 2.8, plain HTTP on 127.0.0.1), to which the chart goes
with `helm push` and the image built by .ci/build-image with `podman push`; the chart comes back
by version and by digest, and the image by the digest the chart renders. .github/workflows/release.yml
does the same against ghcr.io on a `v*` tag.

Needs build and twine in this venv, docker-registry, helm (.ci/install-helm), podman, buildah,
debootstrap and root. Where they are missing: skipped on a developer's machine, FAILED under CI=true.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import tomllib
import yaml

from support.docblocks import curl_until_served
from support.helm import HELM
from support.patience import hang_guard
from warpwatch import __version__

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CHART = ROOT / "helm" / "warpwatch"
IMAGE = os.environ.get("WARPWATCH_IMAGE", "localhost/warpwatch:ci")
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
DIGEST = re.compile(r"^Digest: (sha256:[0-9a-f]{64})$", re.M)


def _cannot(reason: str) -> None:
    """A step that cannot run here: skipped on a developer's machine, a failure in CI."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the release check cannot run: {reason}")
    pytest.skip(reason)


def _run(*argv: str | Path, timeout: float = 300, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kwargs)
    if proc.returncode != 0:
        pytest.fail(f"{shlex.join(str(a) for a in argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def _readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


# ---------------------------------------------------------------------------------------------
# one version


def test_the_version_is_written_once_in_the_package_and_pyproject_reads_it() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "warpwatch.__version__"}
    assert "version" not in (ROOT / "setup.py").read_text(encoding="utf-8")
    printed = _run(sys.executable, ROOT / ".ci" / "package-version").stdout.strip()
    assert printed == __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__), "a plain X.Y.Z: the chart's version is SemVer"


def test_the_installed_metadata_and_warpwatch_version_say_the_package_version() -> None:
    # An editable install keeps the metadata of the day it was installed: a mismatch here means
    # `pip install -e .` again.
    assert importlib.metadata.version("warpwatch") == __version__
    assert _run(BIN / "warpwatch", "--version").stdout.strip() == f"warpwatch {__version__}"


def test_the_chart_version_and_app_version_are_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)


def test_the_image_build_passes_the_package_version_as_its_label_and_tag() -> None:
    script = (ROOT / ".ci" / "build-image").read_text(encoding="utf-8")
    assert "VERSION=$(python3 .ci/package-version)" in script
    assert '--build-arg VERSION="$VERSION"' in script and '-t "$VERSIONED"' in script
    assert "VERSIONED=localhost/warpwatch:$VERSION" in script
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    # the default, for a plain `docker build`; the label reads the argument (tests/deploy/test_deploy.py)
    assert f"ARG VERSION={__version__}\n" in dockerfile
    assert 'org.opencontainers.image.version="${VERSION}"' in dockerfile


def test_the_readme_install_names_this_version_and_says_it_is_not_published_yet() -> None:
    install = _readme_section("Install")
    assert "not yet published" in install.lower()
    assert f"helm install warpwatch oci://ghcr.io/warpwatch/charts/warpwatch --version {__version__}" in install
    assert f"ghcr.io/warpwatch/warpwatch:{__version__}" in install
    assert f"pip install warpwatch=={__version__}" in install


def test_the_release_workflow_publishes_what_the_release_check_checks() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on == {"push": {"tags": ["v*"]}}
    text = WORKFLOW.read_text(encoding="utf-8")
    # the tag must be the package's version; nothing is published otherwise
    assert "version=$(python3 .ci/package-version)" in text and '!= "v${version}"' in text
    for needed in (
        "python -m build",
        "twine check --strict",
        "helm lint --strict",
        "helm push",
        "oci://ghcr.io/warpwatch/charts",
        "ghcr.io/warpwatch/warpwatch",
        "org.opencontainers.image.version",
        "pypa/gh-action-pypi-publish",
    ):
        assert needed in text, needed
    jobs = workflow["jobs"]
    pypi = next(j for j in jobs.values() if any("pypa/gh-action-pypi-publish" in s.get("uses", "") for s in j["steps"]))
    # trusted publishing: an OIDC token, no password or API token stored anywhere
    assert pypi["permissions"]["id-token"] == "write"
    assert "password" not in json.dumps(pypi) and "PYPI_API_TOKEN" not in text


# ---------------------------------------------------------------------------------------------
# the Python packages


class Dist(NamedTuple):
    sdist: Path
    wheel: Path


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    if importlib.util.find_spec("build") is None or not (BIN / "twine").exists():
        _cannot("build and twine are not installed in this venv (pip install build twine; .ci/release-check does)")
    out = tmp_path_factory.mktemp("dist")
    # the sdist first, then the wheel built from the sdist: a file the sdist lacks fails here
    _run(
        sys.executable,
        "-m",
        "build",
        "--outdir",
        out,
        ROOT,
        env={**os.environ, "WARPWATCH_REQUIRE_NATIVE": "1"},
        timeout=600,
    )
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Dist(sdist, wheel)


@pytest.mark.slow
def test_twine_check_passes_the_sdist_and_the_wheel(dist: Dist) -> None:
    proc = _run(BIN / "twine", "check", "--strict", dist.sdist, dist.wheel)
    assert proc.stdout.count("PASSED") == 2, proc.stdout


@pytest.mark.slow
def test_the_sdist_and_the_wheel_carry_the_version_the_samples_and_the_compiled_modules(dist: Dist) -> None:
    assert dist.sdist.name == f"warpwatch-{__version__}.tar.gz"
    assert dist.wheel.name.startswith(f"warpwatch-{__version__}-")
    with zipfile.ZipFile(dist.wheel) as whl:
        names = whl.namelist()
        metadata = Parser().parsestr(whl.read(f"warpwatch-{__version__}.dist-info/METADATA").decode())
    assert metadata["Version"] == __version__ and metadata["License-Expression"] == "Apache-2.0"
    assert f"warpwatch-{__version__}.dist-info/licenses/LICENSE" in names
    assert "warpwatch/py.typed" in names
    assert any(n.startswith("warpwatch/samples/2021_pt19_sm_count_-1_repro") for n in names)
    assert any(re.fullmatch(r"warpwatch/trace/_gpuscan\..*\.so", n) for n in names), "WARPWATCH_REQUIRE_NATIVE=1"
    assert any(re.fullmatch(r"warpwatch/analysis/_windowmath\..*\.so", n) for n in names)
    with tarfile.open(dist.sdist) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
        pkg_info = Parser().parsestr(sdist.extractfile(f"warpwatch-{__version__}/PKG-INFO").read().decode())  # type: ignore[union-attr]
    assert pkg_info["Version"] == __version__
    # the C sources and the headers they include (setup.py's `depends`)
    assert {"agent/warpwatch/trace/_gpuscan.c", "agent/warpwatch/trace/_gpuscan_json.h", "LICENSE"} <= members


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed (.ci/run installs it)")
def test_the_readme_quick_start_runs_from_the_wheel_in_a_fresh_venv(dist: Dist, tmp_path: Path) -> None:
    """The quick start as written, with the wheel in place of `-e .`, in a folder outside the checkout
    (so that nothing of agent/ is importable), without torch: the bundled samples come from the wheel."""
    install, curl, *_ = [b.strip() for b in re.findall(r"```bash\n(.*?)```", _readme_section("Quick start"), re.S)]
    venv, pip, run = install.split(" && ")
    assert (venv, pip) == ("python3 -m venv .venv", ".venv/bin/pip install -q -e .")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARPWATCH_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"  # not this venv's
    _run("bash", "-euo", "pipefail", "-c", f"{venv} && .venv/bin/pip install -q {shlex.quote(str(dist.wheel))}",
         cwd=tmp_path, env=env, timeout=600)  # fmt: skip
    python = tmp_path / ".venv" / "bin" / "python"
    probe = (
        "import importlib.metadata as m, importlib.util as u, warpwatch; "
        "print(m.version('warpwatch'), u.find_spec('torch') is None, warpwatch.__file__)"
    )
    version, no_torch, where = _run(python, "-c", probe, cwd=tmp_path, env=env).stdout.split()
    assert (version, no_torch) == (__version__, "True")
    assert where.startswith(str(tmp_path / ".venv" / "lib")), where  # not the checkout: not editable
    assert _run(tmp_path / ".venv/bin/warpwatch", "--version", env=env).stdout.strip() == f"warpwatch {__version__}"

    port = _free_port()
    agent = subprocess.Popen(
        [*shlex.split(run), "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out = curl_until_served(curl, port, agent, 60)  # the agent's start and first window
    finally:
        agent.terminate()
        log = agent.communicate(timeout=30)[0]
    assert agent.returncode == 0, log[-3000:]
    # what the README shows under "What it shows", served by the installed wheel
    (shown,) = re.findall(r"```text\n(.*?)```", _readme_section("What it shows"), re.S)
    for line in shown.strip().splitlines():
        assert line in out.splitlines(), f"the wheel's agent does not serve a line the README shows: {line}"
    assert '"compiled": "all"' in log or "compiled=all" in log, log[:2000]  # the wheel's compiled modules


# ---------------------------------------------------------------------------------------------
# a real OCI registry: the chart and the image, there and back


def _get(url: str, accept: str = "*/*") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()
    except OSError:
        return 0, {}, b""


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's docker-registry (distribution 2.8) on 127.0.0.1:5000 (another free port when 5000 is
    taken), plain HTTP, its storage in a temporary folder; stopped at the end."""
    binary = shutil.which("docker-registry")
    if binary is None:
        _cannot("docker-registry not installed (apt-get install docker-registry; .ci/run does)")
    work = tmp_path_factory.mktemp("registry")
    with socket.socket() as s:
        port = 5000 if s.connect_ex(("127.0.0.1", 5000)) != 0 else _free_port()
    config = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(work / "data")}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": "release-check-only"},
    }
    (work / "config.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    log = (work / "registry.log").open("w")
    proc = subprocess.Popen([binary, "serve", str(work / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + hang_guard(20)
        while _get(f"http://127.0.0.1:{port}/v2/")[0] != 200:
            assert proc.poll() is None, (work / "registry.log").read_text()
            assert time.monotonic() < deadline, "the registry never answered /v2/"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


class Pushed(NamedTuple):
    ref: str
    digest: str


@pytest.fixture(scope="module")
def chart(registry: str, tmp_path_factory: pytest.TempPathFactory) -> Pushed:
    if HELM is None:
        _cannot("helm not found (bash .ci/install-helm)")
    out = tmp_path_factory.mktemp("chart")
    _run(HELM, "lint", "--strict", CHART)
    _run(HELM, "package", CHART, "--destination", out)
    (package,) = out.glob("*.tgz")
    assert package.name == f"warpwatch-{__version__}.tgz"
    _run(HELM, "lint", "--strict", package)
    proc = _run(HELM, "push", package, f"oci://{registry}/charts", "--plain-http")
    (digest,) = DIGEST.findall(proc.stdout + proc.stderr)
    return Pushed(f"oci://{registry}/charts/warpwatch", digest)


@pytest.fixture(scope="module")
def image(registry: str, tmp_path_factory: pytest.TempPathFactory) -> Pushed:
    missing = [t for t in ("podman", "buildah", "debootstrap") if shutil.which(t) is None]
    if missing:
        _cannot(f"{', '.join(missing)} not installed (apt-get install podman buildah debootstrap; .ci/run does)")
    if os.geteuid() != 0:
        _cannot("building and pushing images needs root here")
    # Cheap when nothing changed (.ci/run has just built it): the base is cached, podman reuses its layers.
    _run("bash", ROOT / ".ci" / "build-image", env={**os.environ, "WARPWATCH_IMAGE": IMAGE}, timeout=1500)
    digest_file = tmp_path_factory.mktemp("image") / "digest"
    ref = f"{registry}/warpwatch:{__version__}"
    _run("podman", "push", "--tls-verify=false", "--digestfile", digest_file, IMAGE, ref, timeout=600)
    return Pushed(ref, digest_file.read_text().strip())


def _manifest_digest(registry: str, repository: str, reference: str, accept: str) -> str:
    status, headers, body = _get(f"http://{registry}/v2/{repository}/manifests/{reference}", accept)
    assert status == 200, body
    return headers["Docker-Content-Digest"]


@pytest.mark.slow
def test_the_chart_comes_back_from_the_registry_by_version_and_by_digest(registry: str, chart: Pushed) -> None:
    oci = "application/vnd.oci.image.manifest.v1+json"
    assert _manifest_digest(registry, "charts/warpwatch", __version__, oci) == chart.digest
    by_version = _run(HELM, "template", chart.ref, "--version", __version__, "--plain-http")
    assert DIGEST.findall(by_version.stderr + by_version.stdout) == [chart.digest]
    by_digest = _run(HELM, "template", f"{chart.ref}@{chart.digest}", "--plain-http")
    assert DIGEST.findall(by_digest.stderr + by_digest.stdout) == [chart.digest]
    shown = yaml.safe_load(_run(HELM, "show", "chart", f"{chart.ref}@{chart.digest}", "--plain-http").stdout)
    assert (shown["version"], shown["appVersion"]) == (__version__, __version__)


@pytest.mark.slow
def test_the_image_the_chart_renders_by_digest_is_pulled_back_with_its_version(
    registry: str, chart: Pushed, image: Pushed, capsys: pytest.CaptureFixture[str]
) -> None:
    docker = "application/vnd.docker.distribution.manifest.v2+json"  # .ci/build-image: --format docker
    assert _manifest_digest(registry, "warpwatch", __version__, docker) == image.digest
    # The chart from the registry, pointed at the pushed image by digest, as a cluster would get it.
    rendered = _run(
        HELM,
        "template",
        "gpu",
        f"{chart.ref}@{chart.digest}",
        "--plain-http",
        "--set",
        f"example.enabled=true,image.repository={registry}/warpwatch,image.digest={image.digest}",
    ).stdout
    pods = [d["spec"]["template"]["spec"] for d in yaml.safe_load_all(rendered) if d and d.get("kind") == "Deployment"]
    containers = [c for pod in pods for c in [*pod.get("initContainers", []), *pod["containers"]]]
    images = {c["image"] for c in containers if c["image"].startswith(registry)}
    assert images == {f"{registry}/warpwatch:{__version__}@{image.digest}"}
    (sidecar,) = images
    by_digest = f"{registry}/warpwatch@{image.digest}"
    subprocess.run(["podman", "rmi", "--force", by_digest], capture_output=True, timeout=120)
    _run("podman", "pull", "--tls-verify=false", sidecar, timeout=600)
    (pulled,) = json.loads(_run("podman", "image", "inspect", by_digest).stdout)
    (local,) = json.loads(_run("podman", "image", "inspect", IMAGE).stdout)
    assert pulled["Id"] == local["Id"]  # the same config blob: the image built here, unchanged
    assert image.digest in pulled["RepoDigests"][0] or any(image.digest in d for d in pulled["RepoDigests"])
    assert pulled["Config"]["Labels"]["org.opencontainers.image.version"] == __version__
    assert f"localhost/warpwatch:{__version__}" in local["RepoTags"]  # .ci/build-image's second tag
    with capsys.disabled():
        print(f"\nrelease: chart {chart.ref}@{chart.digest}; image {image.ref} pushed as {image.digest}, pulled by it")
