"""The import graph points one way.

core/ never imports textual and the headless CLI never imports the TUI (each checked in a fresh
interpreter); an AST walk over every module checks the whole graph: no cycle, nothing but `__main__`
imports the CLI entry point, the TUI imports no CLI module.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import python_c

import gputop_tracker
import gputop_tracker.core

CORE_MODULES = sorted(m.name for m in pkgutil.walk_packages(gputop_tracker.core.__path__, "gputop_tracker.core."))


def test_core_modules_found() -> None:
    assert {
        "gputop_tracker.core.sampling.sampler",
        "gputop_tracker.core.summary.builder",
        "gputop_tracker.core.model.models",
    } <= set(CORE_MODULES)


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_does_not_import_textual(module: str) -> None:
    code = f"import sys, {module}; bad = [m for m in sys.modules if m == 'textual' or m.startswith('textual.')]; print(bad)"
    proc = python_c(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_headless_run_never_imports_textual() -> None:
    code = (
        "import sys, atexit\n"
        "atexit.register(lambda: sys.stderr.write('TEXTUAL=' + str('textual' in sys.modules) + '\\n'))\n"
        "from gputop_tracker.cli.entry import main\n"
        "code = main(['--headless', '--no-save', '--', 'true'])\n"
        "sys.exit(code)\n"
    )
    proc = python_c(code)
    assert proc.returncode == 0, proc.stderr
    assert "TEXTUAL=False" in proc.stderr


# what each process of a headless run had loaded when it ended (both end through os._exit)
LOADED = """
import json, os, sys
front, out, _exit = os.getpid(), sys.argv[1], os._exit
def dump(code):
    with open(out + ("front" if os.getpid() == front else "sampler"), "w") as f:
        json.dump(sorted(sys.modules), f)
    _exit(code)
os._exit = dump
sys.argv = ["gputop-track", "--headless", "--no-save", "--", "true"]
from gputop_tracker._entry import run
run()
"""


def test_a_headless_run_loads_only_what_it_uses(tmp_path: Path) -> None:
    """Start-up is most of what a short run costs the tool: the front end loads neither the TUI, nor an exporter
    it was not asked for, nor the sampler's modules; the forked sampler loads no pydantic, and neither platform
    nor py_compile while the probe's cached bytecode is fresh."""
    from gputop_tracker.core.blocks import probe

    probe._compiled()  # the cache as a run leaves it
    out = str(tmp_path / "loaded-")
    proc = subprocess.run([sys.executable, "-c", LOADED, out], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    front = set(json.loads(Path(out + "front").read_text()))
    sampler = set(json.loads(Path(out + "sampler").read_text()))
    assert "gputop_tracker.core.model.models" in front and "gputop_tracker.core.sampling.sampler" in sampler
    not_in_front = {"textual", "gputop_tracker.core.integrations.exporters", "gputop_tracker.core.sampling.sampler"}
    assert front & not_in_front == set()
    assert "gputop_tracker.core.summary.events" not in front
    assert sampler & {"pydantic", "textual", "platform"} == set()
    if _fresh(probe.SITE_FILE):  # else the sampler compiles it, and may
        assert "py_compile" not in sampler


def _fresh(source: str) -> bool:
    import importlib.util
    import os

    cached = importlib.util.cache_from_source(source)
    return os.path.exists(cached) and os.stat(cached).st_mtime >= os.stat(source).st_mtime


# --------------------------------------------------------------------------- the import graph, by AST
#
# Every import statement of every module of the package counts: module level and inside functions
# (a function-level import closes a cycle as surely as a top-level one, it only fires later), `import x`,
# `from x import y` (an edge to x.y when that is a module, else to x) and relative imports. Imports under
# `if TYPE_CHECKING:` are left out: they never run. Parent packages are not counted as imported: Python
# imports them first, before the module that imports, so they cannot close a cycle by themselves.

PACKAGE_DIR = Path(gputop_tracker.__file__).parent


def module_files(package_dir: Path) -> dict[str, Path]:
    """Module name -> file, for every .py file of the package (a package's __init__ under its own name)."""
    root = package_dir.name
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [root, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those only under `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def imported_modules(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules `module` imports (any module name; resolve relative imports against `module`)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
            continue
        if node.level:
            parts = module.split(".")
            base_parts = parts if is_package else parts[:-1]
            base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join([*base_parts, *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            out.add(sub if sub in known else base)
    return out


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> every module it imports (all names, not only the package's)."""
    files = module_files(package_dir)
    known = set(files)
    return {module: imported_modules(module, path, known) for module, path in files.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of the package's own modules with more than one module (or a
    module that imports itself): each is at least one import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm; the package is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v] & graph.keys()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def importers_of(graph: dict[str, set[str]], target: str) -> set[str]:
    return {m for m, deps in graph.items() if target in deps}


GRAPH = import_graph(PACKAGE_DIR)


def test_the_walk_sees_function_level_relative_and_from_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg._version import v\n")
    (pkg / "_version.py").write_text("v = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.sub import c\n"
        "def f():\n    from . import b\n    import pkg.top\n"
        "class K:\n    def g(self):\n        from ..top import name\n"
    )
    (pkg / "sub" / "b.py").write_text("def h():\n    from pkg.sub.a import f\n")
    (pkg / "sub" / "c.py").write_text("")
    (pkg / "top.py").write_text("from pkg import v\n")
    graph = import_graph(pkg)
    assert graph["pkg.sub.a"] == {"typing", "pkg.sub.b", "pkg.top"}  # not pkg.sub.c: TYPE_CHECKING only
    assert graph["pkg.top"] == {"pkg"}  # `v` is no module: the package's __init__ is what runs
    assert import_cycles(graph) == [["pkg.sub.a", "pkg.sub.b"]]


def test_graph_covers_the_package() -> None:
    assert {
        "gputop_tracker",
        "gputop_tracker.cli.entry",
        "gputop_tracker.core.sampling.sampler",
        "gputop_tracker.tui.history.screens.sessions",
    } <= set(GRAPH)
    assert "gputop_tracker.core.model.models" in GRAPH["gputop_tracker.core.store.sessions"]  # a function-level import


def test_no_import_cycle_in_the_package() -> None:
    assert import_cycles(GRAPH) == []


def test_only_main_imports_the_cli_entry_point() -> None:
    # the console script `gputop_tracker._entry:run` (which `__main__` runs too) is the way in
    assert importers_of(GRAPH, "gputop_tracker.cli.entry") <= {"gputop_tracker._entry"}
    assert importers_of(GRAPH, "gputop_tracker._entry") <= {"gputop_tracker.__main__"}


def test_tui_never_imports_a_cli_module() -> None:
    bad = {m: sorted(d for d in GRAPH[m] if d.startswith("gputop_tracker.cli")) for m in GRAPH if ".tui" in m}
    assert {m: deps for m, deps in bad.items() if deps} == {}


def _part(module: str) -> str:
    """The layer a module belongs to: a subpackage of core (`core.gpu`), else a top-level part (`tui`, `api`)."""
    parts = module.split(".")[1:]
    if parts[:1] == ["core"] and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0] if parts else ""


# part -> the only other parts of the package it may import (itself and the leaf `_version` always allowed). Every
# part of the package has a line, and no module is exempt: the floors, bottom up, are the kernel's readers (proc),
# the models, GPUs, storage, reports, the summary, code blocks, the sampler, the integrations, then the faces.
CORE = {f"core.{p}" for p in ("proc", "model", "gpu", "store", "report", "summary", "blocks", "sampling")}
LAYERS: dict[str, set[str]] = {
    "_probe": set(),  # runs inside the user's processes: standard library only
    "core.proc": set(),
    "core.model": set(),
    "core.gpu": {"core.model", "core.proc"},
    "core.store": {"core.model"},
    "core.report": {"core.model", "core.gpu", "core.store"},
    "core.summary": {"core.model", "core.gpu", "core.report", "core.proc"},
    # the probe's place: its rules (standard library only) are the probe's own, not written twice
    "core.blocks": {"core.model", "core.gpu", "core.summary", "core.proc", "_probe"},
    "core.sampling": {"core.model", "core.gpu", "core.proc", "core.store", "core.summary", "core.blocks"},
    "core.integrations": CORE - {"core.blocks"},
    "console": {"core.model"},
    "tui": {"core.model", "core.gpu", "core.report", "core.sampling", "core.store", "core.summary", "console"},
    "api": CORE | {"core.integrations", "console", "_probe"},
    "cli": CORE | {"core.integrations", "console", "tui"},
    "_entry": {"cli", "console"},
    "__main__": {"_entry"},
    "core": set(),  # core's own __init__
    "core.face": set(),  # how a package offers its names (every core package may use it)
    "": {"api"},  # the package's own __init__: `from gputop_tracker import block`
}


def test_every_part_of_the_package_has_a_layer() -> None:
    assert {_part(m) for m in GRAPH} - {"_version"} == set(LAYERS)


@pytest.mark.parametrize("part", sorted(LAYERS))
def test_each_part_imports_only_the_layers_below_it(part: str) -> None:
    allowed = LAYERS[part] | {part, "_version"} | ({"core.face"} if part.startswith("core.") else set())
    bad = {
        m: sorted(d for d in deps if d.startswith("gputop_tracker") and _part(d) not in allowed)
        for m, deps in GRAPH.items()
        if _part(m) == part
    }
    assert {m: deps for m, deps in bad.items() if deps} == {}


def test_an_arrow_back_up_is_caught() -> None:
    """The rule itself can fail: the kernel readers importing the sampler is an arrow back up."""
    graph = {**GRAPH, "gputop_tracker.core.proc.procfs": {"gputop_tracker.core.sampling.sampler"}}
    part = "core.proc"
    bad = [d for d in graph["gputop_tracker.core.proc.procfs"] if _part(d) not in LAYERS[part] | {part}]
    assert bad == ["gputop_tracker.core.sampling.sampler"]


def test_below_the_sampler_nothing_imports_it() -> None:
    below = ("core.summary", "core.blocks", "core.gpu", "core.model", "core.report", "core.store", "core.proc")
    bad = {m: sorted(d for d in GRAPH[m] if _part(d) == "core.sampling") for m in GRAPH if _part(m) in below}
    assert {m: deps for m, deps in bad.items() if deps} == {}
    assert not any(_part(d) == "core.integrations" for m in GRAPH if _part(m) == "core.sampling" for d in GRAPH[m])


def test_other_parts_use_the_gpu_packages_face() -> None:
    """GPUs are reached through `core.gpu`'s `__init__` (its `__all__`), never a vendor's or a helper's module."""
    bad = {
        m: sorted(d for d in GRAPH[m] if d.startswith("gputop_tracker.core.gpu."))
        for m in GRAPH
        if _part(m) != "core.gpu"
    }
    assert {m: deps for m, deps in bad.items() if deps} == {}
    import gputop_tracker.core.gpu as gpu

    assert all(hasattr(gpu, name) for name in gpu.__all__)


def test_core_never_imports_the_api_the_cli_or_the_ui() -> None:
    outer = ("gputop_tracker.api", "gputop_tracker.cli", "gputop_tracker.tui", "gputop_tracker.console")
    bad = {m: sorted(d for d in GRAPH[m] if d.startswith(outer)) for m in GRAPH if m.startswith("gputop_tracker.core")}
    assert {m: deps for m, deps in bad.items() if deps} == {}


def test_core_holds_subpackages_not_a_flat_list_of_modules() -> None:
    core = PACKAGE_DIR / "core"
    modules = [p.name for p in core.glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= 12, modules


def test_core_never_imports_textual_at_any_level() -> None:
    bad = {
        m: sorted(d for d in GRAPH[m] if d == "textual" or d.startswith("textual."))
        for m in GRAPH
        if m.startswith("gputop_tracker.core")
    }
    assert {m: deps for m, deps in bad.items() if deps} == {}


def _face_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of each `from gputop_tracker.core… import name` in a file, and `import gputop_tracker.core…`."""
    out = []
    for node in _import_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gputop_tracker.core"):
            out += [(node.module or "", a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.startswith("gputop_tracker.core")]
    return out


def test_the_tui_and_the_api_import_core_through_its_faces() -> None:
    """The TUI and the Python API import what a core package's face offers (`from gputop_tracker.core.model import
    X`, X in its `__all__`), never one of its modules by path."""
    import importlib

    bad = []
    for part in ("tui", "api"):
        for path in sorted((PACKAGE_DIR / part).rglob("*.py")):
            for module, name in _face_imports(path):
                face = getattr(importlib.import_module(module), "__all__", []) if module.count(".") == 2 else []
                if module.count(".") != 2 or name not in face:
                    bad.append(f"{path.relative_to(PACKAGE_DIR)}: {module} {name}")
    assert bad == []


@pytest.mark.parametrize("package", sorted({_part(m) for m in GRAPH if _part(m).startswith("core.")} - {"core.face"}))
def test_every_core_package_states_its_face(package: str) -> None:
    """`__all__` names what the package offers, and each name is really there."""
    import importlib

    mod = importlib.import_module(f"gputop_tracker.{package}")
    face = getattr(mod, "__all__", None)
    assert isinstance(face, list) and face, package
    for name in face:
        assert getattr(mod, name) is not None, (package, name)
