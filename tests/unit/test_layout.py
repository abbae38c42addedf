"""The layout of the code (ARCHITECTURE.md): who may import whom, and no import circles.

- The import contracts of ``[tool.importlinter]`` in pyproject.toml hold (the same check CI's lint step
  runs with ``lint-imports``): agentr > api | search_service | critic_service | splice_service >
  train_service > core, ``core`` imports nothing outside itself, the critic and splice workers do not
  import each other, and no package's modules import each other in a circle.
- No circle between single modules of a package (grimp's import graph, lazy imports inside functions
  included), reported module by module so a failure says which files to untangle.
- Every ``core`` module imports with the packages above it made unimportable, which also catches an
  import by name (``importlib.import_module("critic_service...")``) that static analysis cannot see.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agentr", "api", "search_service", "critic_service", "splice_service", "train_service", "core")
ABOVE_CORE = tuple(p for p in PACKAGES if p != "core")


def strongly_connected(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """The import circles among ``modules`` (Tarjan's strongly connected components of size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        # iterative depth-first search: (module, its remaining successors)
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start) & modules)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.find_modules_directly_imported_by(succ) & modules))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return circles


def test_strongly_connected_finds_a_circle_and_nothing_else() -> None:
    """The circle finder itself, on a graph with one circle of three and an acyclic tail."""
    graph = grimp.ImportGraph()
    edges = [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.d", "p.e")]
    for importer, imported in edges:
        graph.add_import(importer=importer, imported=imported)
    assert strongly_connected(graph, set(graph.modules)) == [["p.a", "p.b", "p.c"]]


def test_import_contracts_hold() -> None:
    # in a child process: import-linter configures logging (dictConfig), which would silence the
    # loggers of the tests that run after this one
    probe = (
        "import sys\n"
        "from importlinter.cli import lint_imports\n"
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


def test_no_import_circle_between_modules_of_a_package() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    problems = []
    for package in PACKAGES:
        modules = {package} | graph.find_descendants(package)
        for circle in strongly_connected(graph, modules):
            edges = [
                f"{a} -> {b}"
                for a in circle
                for b in circle
                if graph.direct_import_exists(importer=a, imported=b)
            ]
            problems.append(f"circle of {len(circle)} modules in {package}: " + "; ".join(edges))
    assert not problems, "\n".join(problems)


def test_every_core_module_imports_without_the_packages_above_core() -> None:
    probe = (
        "import importlib, pkgutil, sys\n"
        f"for name in {ABOVE_CORE!r}:\n"
        "    sys.modules[name] = None  # importing it now raises ImportError\n"
        "import core\n"
        "names = [m.name for m in pkgutil.walk_packages(core.__path__, 'core.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.strip()) > 50  # every module was walked, not an empty package
