"""The package's layers, read from its source: what each stage may import."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agent" / "warpwatch"


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules `path` imports (relative imports resolved)."""
    package = ["warpwatch", *path.relative_to(PACKAGE).parent.parts]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)
    return out


def imports_of(stage: str) -> dict[str, set[str]]:
    return {str(p.relative_to(PACKAGE)): imported_modules(p) for p in sorted((PACKAGE / stage).rglob("*.py"))}


ROOMS = ("capture", "trace", "analysis", "names", "export", "dashboards", "evidence", "serving", "service", "commands")
"""The rooms in their order (docs/development.md, "Rooms"): each imports only from itself, from rooms to
its left and from the foundations."""
FOUNDATIONS = ("config", "runtime")
"""The packages among the foundations (with the top-level modules): every room may import them, and
they import no room."""


def room_of(module: str) -> str | None:
    """The room of a `warpwatch.*` module; None for the foundations and anything outside the package."""
    parts = module.split(".")
    if parts[0] != "warpwatch" or len(parts) < 2 or parts[1] in FOUNDATIONS or not (PACKAGE / parts[1]).is_dir():
        return None
    return parts[1]


TOP_LEVEL = {"errors", "inprocess", "logs", "model", "overhead", "sourcestats"}
"""The package's top-level modules (beside `__init__` and `__main__`): the foundations that fit no
foundation package, and `inprocess`, the documented `warpwatch.inprocess` API. At most 8
(docs/development.md, "Rooms"): a new module goes into a room or a foundation package."""


def test_the_top_level_holds_only_the_listed_modules() -> None:
    assert {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"} == TOP_LEVEL
    assert len(TOP_LEVEL) <= 8


def test_every_folder_of_the_package_is_a_room_or_a_foundation() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == {*ROOMS, *FOUNDATIONS}


def test_each_room_imports_only_from_rooms_to_its_left() -> None:
    offending = {
        f"{room}/{f}": sorted(m for m in mods if (r := room_of(m)) is not None and ROOMS.index(r) > ROOMS.index(room))
        for room in ROOMS
        for f, mods in imports_of(room).items()
    }
    assert {f: m for f, m in offending.items() if m} == {}


def test_the_foundations_import_no_room() -> None:
    foundations = [p for p in PACKAGE.glob("*.py") if p.stem not in ("__main__", "inprocess")]
    foundations += [p for name in FOUNDATIONS for p in (PACKAGE / name).rglob("*.py")]
    offending = {str(p.relative_to(PACKAGE)): sorted(filter(room_of, imported_modules(p))) for p in foundations}
    assert {f: m for f, m in offending.items() if m} == {}


def test_export_imports_nothing_from_capture() -> None:
    offending = {
        f: sorted(m for m in mods if m.startswith("warpwatch.capture")) for f, mods in imports_of("export").items()
    }
    assert {f: m for f, m in offending.items() if m} == {}


def test_capture_names_no_metric() -> None:
    offending = {
        f: sorted(m for m in mods if m.startswith(("warpwatch.export", "prometheus_client")))
        for f, mods in imports_of("capture").items()
    }
    assert {f: m for f, m in offending.items() if m} == {}
    for path in (PACKAGE / "capture").rglob("*.py"):  # the engines' own counters are theirs to name
        assert not re.search(r"warpwatch_\w*_total", path.read_text()), path


def test_the_source_stats_live_below_capture_and_export() -> None:
    assert {m for m in imported_modules(PACKAGE / "sourcestats.py") if m.startswith("warpwatch")} == set()


def test_no_getattr_probes_a_source() -> None:
    for path in [*(PACKAGE / "service").rglob("*.py"), *(PACKAGE / "export").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        probes = [
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in ("getattr", "hasattr")
            and isinstance(n.args[0], ast.Name)
            and n.args[0].id in ("src", "source")
        ]
        assert probes == [], path


def test_no_test_touches_a_private_attribute_of_the_service_or_the_builder() -> None:
    private = re.compile(r"\b(svc|service|builder|self\.builder)\._[a-z]\w*")
    tests = Path(__file__).resolve().parent
    offending = [
        f"{p.relative_to(tests)}:{n}"
        for p in sorted(tests.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert offending == []
