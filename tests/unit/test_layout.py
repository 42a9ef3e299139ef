"""The layout says what a module is: pure decisions in `pure/` (and the shared core), I/O beside.

docs/architecture.md explains the folders; these tests keep the code to it.
"""

from __future__ import annotations

import ast
import collections
import json
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[2]
SIDES = {"operator": ROOT / "operator", "sidecar": ROOT / "sidecar", "plugin": ROOT / "plugin"}

# Libraries that talk to something: a pure module importing one (even indirectly) is a shell.
IO_LIBRARIES = (
    "aiohttp", "kopf", "kubernetes", "kubernetes_asyncio", "etcd3aio", "grpc", "boto3", "botocore",
    "aiobotocore", "minio", "prometheus_client", "tenacity", "requests", "urllib3", "http.client",
    "urllib.request", "socketserver", "ssl",
)


def module_name(path: pathlib.Path) -> str:
    for side, folder in SIDES.items():
        if path.is_relative_to(folder):
            rel = path.relative_to(folder)
            break
    else:
        rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def shipped() -> list[pathlib.Path]:
    folders = [ROOT / "raftset", SIDES["operator"] / "raftset", SIDES["sidecar"] / "raftset", SIDES["plugin"] / "raftset"]
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


def pure_modules(side: str) -> list[str]:
    if side == "shared":
        return sorted(module_name(p) for p in (ROOT / "raftset").glob("*.py"))
    folder = SIDES[side] / "raftset" / side / "pure"
    return sorted(module_name(p) for p in folder.rglob("*.py"))


def loaded_io(modules: list[str]) -> dict[str, list[str]]:
    """The I/O libraries each module pulls in, each imported alone in a fresh interpreter."""
    script = (
        "import importlib, json, sys\n"
        f"io = {IO_LIBRARIES!r}\n"
        "importlib.import_module(sys.argv[1])\n"
        "print(json.dumps(sorted(n for n in io if n in sys.modules)))\n"
    )
    found = {}
    for module in modules:
        out = subprocess.run([sys.executable, "-c", script, module], capture_output=True, text=True, check=True)
        found[module] = json.loads(out.stdout)
    return found


@pytest.mark.parametrize("side", ["shared", "operator", "sidecar", "plugin"])
def test_pure_modules_import_no_io_library(side: str) -> None:
    modules = pure_modules(side)
    assert len(modules) >= (2 if side == "plugin" else 5), f"no pure package found for {side}"
    # One interpreter for all first: cheap when clean; alone each only to name the culprit.
    together = subprocess.run(
        [sys.executable, "-c",
         "import importlib, json, sys\n"
         f"for m in {modules!r}: importlib.import_module(m)\n"
         f"print(json.dumps(sorted(n for n in {IO_LIBRARIES!r} if n in sys.modules)))\n"],
        capture_output=True, text=True, check=True)
    if json.loads(together.stdout):
        culprits = {m: libs for m, libs in loaded_io(modules).items() if libs}
        pytest.fail(f"pure modules importing I/O libraries: {culprits}")


def test_the_purity_check_can_say_no() -> None:
    assert loaded_io(["raftset.sidecar.io.etcdclient"])["raftset.sidecar.io.etcdclient"]


def classes() -> dict[str, list[str]]:
    found = collections.defaultdict(list)
    for path in shipped():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(module_name(path))
    return found


def test_no_two_classes_share_a_name() -> None:
    shared = {name: where for name, where in classes().items() if len(where) > 1}
    assert not shared, f"one name, several classes: {shared}"


def test_no_import_waits_for_type_checking() -> None:
    """An import needed only under TYPE_CHECKING hides a cycle; the sidecar's shells had one."""
    hidden = [module_name(p) for p in shipped() if "TYPE_CHECKING" in p.read_text()]
    assert not hidden, hidden


def imports() -> dict[str, set[str]]:
    """Which shipped modules each shipped module imports (TYPE_CHECKING blocks included)."""
    names = {module_name(p): p for p in shipped()}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        graph[name] = {t for t in targets if t in names and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    assert not cycles(imports())


def test_the_cycle_check_can_say_no() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def documented() -> dict[str, str]:
    """docs/architecture.md's module table: path (as written, `…` for the side's package) -> kind."""
    rows = {}
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[0].endswith(".py`"):
            for path in re.findall(r"`([^`]+\.py)`", cells[0]):
                rows[path] = cells[1]
    return rows


def written(path: pathlib.Path) -> str:
    """A module's path as the architecture doc writes it: `operator/…/pure/spec.py`."""
    rel = path.relative_to(ROOT).as_posix()
    for side in SIDES:
        prefix = f"{side}/raftset/{side}/"
        if rel.startswith(prefix):
            return f"{side}/…/" + rel[len(prefix):]
    return rel


def kind_of(path: pathlib.Path) -> str:
    """pure, shell or io, by folder alone: the layout is the classification."""
    parts = path.relative_to(ROOT).parts
    if parts[0] == "raftset" or "pure" in parts:
        return "pure"
    return "io" if "io" in parts else "shell"


def test_the_architecture_doc_names_every_module_with_the_kind_its_folder_gives() -> None:
    modules = {written(p): kind_of(p) for p in shipped() if p.name != "__init__.py"}
    rows = documented()
    assert sorted(set(modules) - set(rows)) == [], "modules missing from docs/architecture.md"
    assert sorted(set(rows) - set(modules)) == [], "docs/architecture.md names modules that do not exist"
    wrong = {path: (rows[path], kind) for path, kind in modules.items() if rows[path] != kind}
    assert not wrong, f"documented kind differs from the folder's (documented, folder): {wrong}"


def test_every_test_folder_is_collected_from_the_root() -> None:
    """`make test` collects from pyproject's testpaths: a folder of tests missing there is a tier that
    never runs, silently (the `real` tier was, until its folder was listed)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    folders = {str(path.parent.relative_to(ROOT)) for path in (ROOT / "tests").glob("*/test_*.py")}
    assert folders - set(config["testpaths"]) == set()
