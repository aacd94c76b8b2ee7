"""The house rules of the code base, checked: one shape per stage, imports that point
down the layers with no circle and none hidden in a function, one device
seam, no document cited outside the repository.

Layers (imports only point down; a module of no layer fails
:func:`test_every_module_has_a_layer`):

* front ends: :data:`FRONT_ENDS` (the command line, the report; the notebooks, outside
  the package);
* stages: ``hyport_lib.<name>`` for each notebook ``NN_<name>.ipynb``
  (:func:`hyport_lib.stages.discover_stages`); a stage never imports another;
* runtime: :data:`RUNTIME`;
* utilities: :data:`UTILITIES`.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from hyport_lib.stages import discover_stages

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "hyport_lib"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)

FRONT_ENDS = ("hyport_lib.commands", "hyport_lib.report", "hyport_lib.__main__")
STAGES = tuple(f"hyport_lib.{stage.name}" for stage in discover_stages())
RUNTIME = ("hyport_lib.backend", "hyport_lib.models", "hyport_lib.npu_attention", "hyport_lib.devices",
           "hyport_lib.checkpoint_files", "hyport_lib.processes", "hyport_lib.scan",
           "hyport_lib.port", "hyport_lib.proof", "hyport_lib.triage", "hyport_lib.memory", "hyport_lib.nodes")
UTILITIES = ("hyport_lib.utils", "hyport_lib.results", "hyport_lib.display", "hyport_lib.stages", "hyport_lib.workbook",
             "hyport_lib.params", "hyport_lib.drafting")


def _module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


NAMES = {_module_name(p): p for p in MODULES}


# --------------------------------------------------------------------------- imports
def _imports(path: Path, root: Path = REPO, names=NAMES) -> list[tuple[str, int, bool]]:
    """Every import of a module of ``names`` in ``path``: ``(module, line, in_function)``,
    once per module and line.

    All of them: at module level, in ``if TYPE_CHECKING`` blocks (a circle there is still a
    circle), in function and method bodies, and ``importlib.import_module("...")`` /
    ``__import__("...")`` with a constant name. ``from pkg import name`` imports the
    module ``pkg.name`` when there is one, else ``pkg``; importing ``a.b.c`` also imports
    ``a.b``. A module's own parent packages are left out: Python imports them before the
    module, that edge is not a circle of ours.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    own_ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    found: dict[tuple[str, int], bool] = {}

    def add(target: str, line: int, in_function: bool) -> None:
        parts = target.split(".")
        for i in range(len(parts), 0, -1):
            module = ".".join(parts[:i])
            if module in names and module != name and module not in own_ancestors:
                found.setdefault((module, line), in_function)

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, in_function)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in names else base, node.lineno, in_function)
        elif isinstance(node, ast.Call) and (
                getattr(node.func, "attr", None) == "import_module"
                or getattr(node.func, "id", None) in ("import_module", "__import__")) \
                and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            add(node.args[0].value, node.lineno, in_function)
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return [(module, line, in_function) for (module, line), in_function in found.items()]


def _graph(names=NAMES, root: Path = REPO) -> dict[str, dict[str, int]]:
    """``{module: {imported module: first line}}`` over every import."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in names.items():
        edges: dict[str, int] = {}
        for target, line, _ in _imports(path, root, names):
            edges.setdefault(target, line)
        graph[name] = edges
    return graph


GRAPH = _graph()


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def walk(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return cycles


def _where(name: str, line: int, names=NAMES, root: Path = REPO) -> str:
    return f"{names[name].relative_to(root)}:{line}"


def test_no_import_circle_in_hyport_lib():
    """No circle, counting the imports in function bodies too: a lazy import that closes a
    circle is a piece in the wrong module (move it down), not a fix."""
    cycles = _cycles(GRAPH)
    assert not cycles, "import circles (each edge: file:line of the import):\n" + "\n".join(
        " -> ".join(f"{a} ({_where(a, GRAPH[a][b])})" for a, b in zip(c, c[1:])) + f" -> {c[-1]}"
        for c in cycles)


def test_the_circle_finder_finds_planted_circles(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\n"
                                      "if TYPE_CHECKING:\n    from pkg.a import thing\n")
    (pkg / "c.py").write_text("def lazy():\n    from . import d\n")  # lazy: still an edge
    (pkg / "d.py").write_text("import pkg.c\n")
    (pkg / "e.py").write_text("import os\nimport pkg\n")  # its own package: no edge
    names = {_module_name(p, tmp_path): p for p in sorted(pkg.rglob("*.py"))}
    graph = _graph(names, tmp_path)
    assert graph["pkg.c"] == {"pkg.d": 2} and graph["pkg.e"] == {}
    assert graph["pkg.a"] == {"pkg.sub.b": 1, "pkg.sub": 1}
    assert _cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"], ["pkg.c", "pkg.d", "pkg.c"]]


def _imports_in_functions(names=NAMES, root: Path = REPO) -> list[str]:
    """``file:line: imports module`` for each import in a function body (the module
    itself, not the packages it lies in)."""
    offenders = []
    for path in names.values():
        by_line: dict[int, list[str]] = {}
        for target, line, in_function in _imports(path, root, names):
            if in_function:
                by_line.setdefault(line, []).append(target)
        for line, targets in sorted(by_line.items()):
            leaves = [t for t in targets if not any(o.startswith(t + ".") for o in targets)]
            offenders.append(f"{path.relative_to(root)}:{line}: imports {', '.join(sorted(leaves))}")
    return offenders


def test_no_hyport_lib_import_inside_a_function():
    """hyport_lib imports sit at the top of the module, where a reader (and the circle
    test) sees what a module depends on. A module whose import is heavy makes its own
    third-party import (torch, pandas, ...) lazy instead."""
    offenders = _imports_in_functions()
    assert not offenders, f"{len(offenders)} hyport_lib import(s) inside a function; move them " \
                          "to module level:\n" + "\n".join(offenders)


def test_the_function_import_finder_finds_planted_ones(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("")
    (pkg / "high.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import low\n"          # module level: fine
        "def f():\n    import json\n    from . import low\n"  # line 6: relative, in a function
        "class C:\n    def m(self):\n        import pkg.low\n"  # line 9: in a method
        "def g():\n    import importlib\n    return importlib.import_module('pkg.low')\n")
    names = {_module_name(p, tmp_path): p for p in sorted(pkg.rglob("*.py"))}
    assert _imports_in_functions(names, tmp_path) == [
        "pkg/high.py:6: imports pkg.low", "pkg/high.py:9: imports pkg.low",
        "pkg/high.py:12: imports pkg.low"]


# --------------------------------------------------------------------------- layers
def _within(name: str, prefixes) -> str | None:
    """The prefix of ``prefixes`` that ``name`` is or lies under, or None."""
    return next((p for p in prefixes if name == p or name.startswith(p + ".")), None)


def _layer(name: str) -> str | None:
    for layer, prefixes in (("front end", FRONT_ENDS), ("stage", STAGES), ("runtime", RUNTIME),
                            ("utility", UTILITIES)):
        if _within(name, prefixes):
            return layer
    return None


def _layer_breaches(graph, where=_where) -> list[str]:
    """Imports that point up or sideways: stage -> other stage, stage -> front end,
    runtime -> stage / front end, utility -> stage / front end / runtime."""
    above = {"front end": (), "stage": ("front end",), "runtime": ("front end", "stage"),
             "utility": ("front end", "stage", "runtime")}
    breaches = []
    for name, edges in sorted(graph.items()):
        layer = _layer(name)
        for target, line in sorted(edges.items(), key=lambda e: e[1]):
            target_layer = _layer(target)
            if layer and target_layer in above[layer]:
                breaches.append(f"{where(name, line)}: {layer} {name} imports {target_layer} {target}")
            elif layer == "stage" and target_layer == "stage" \
                    and _within(name, STAGES) != _within(target, STAGES):
                breaches.append(f"{where(name, line)}: stage {name} imports another stage, {target}")
    return breaches


def test_every_module_has_a_layer():
    unplaced = sorted(n for n in NAMES if n != "hyport_lib" and _layer(n) is None)
    assert not unplaced, ("modules in no layer; place them in FRONT_ENDS, RUNTIME or UTILITIES "
                          "of tests/test_architecture.py (or move them): " + ", ".join(unplaced))


def test_stages_never_import_one_another():
    breaches = [b for b in _layer_breaches(GRAPH) if "imports another stage" in b]
    assert not breaches, "\n".join(breaches)


def test_imports_only_point_down_the_layers():
    """Runtime and utilities import no stage and no front end (nor utilities the
    runtime); stages import no front end."""
    breaches = [b for b in _layer_breaches(GRAPH) if "imports another stage" not in b]
    assert not breaches, "\n".join(breaches)


def test_the_layer_check_finds_planted_breaches():
    graph = {"hyport_lib.train.stage": {"hyport_lib.weights.scan": 3, "hyport_lib.train.config": 4,
                                        "hyport_lib.backend": 5},
             "hyport_lib.backend": {"hyport_lib.commands._cli": 7, "hyport_lib.utils.files": 8},
             "hyport_lib.utils.files": {"hyport_lib.models.tiny": 9},
             "hyport_lib.commands.train": {"hyport_lib.train.stage": 2}}
    assert _layer_breaches(graph, lambda name, line: f"{name}:{line}") == [
        "hyport_lib.backend:7: runtime hyport_lib.backend imports front end hyport_lib.commands._cli",
        "hyport_lib.train.stage:3: stage hyport_lib.train.stage imports another stage, "
        "hyport_lib.weights.scan",
        "hyport_lib.utils.files:9: utility hyport_lib.utils.files imports runtime hyport_lib.models.tiny"]


def _tracked_text_files():
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for rel in out:
        path = REPO / rel
        if path.suffix in (".py", ".md", ".ipynb", ".yaml", ".yml", ".sh", ".toml", ".txt", ".cfg",
                           ".j2", ".json") or path.parent.name == ".ci":
            if path.is_file():
                yield path


@pytest.mark.slow  # asks git which files are tracked: a process
def test_no_file_cites_a_path_outside_the_repository():
    outside = re.compile(r"(\.\./shared|/work/shared|shared/spec/|shared/seeds/|\.\./\.library|"
                         r"/work/main|\bspec/[a-z_]+\.md|ascend_field_notes\.md(?<!docs/ascend_field_notes\.md))")
    offenders = []
    for path in _tracked_text_files():
        if path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for match in outside.finditer(line):
                if "docs/" in line[max(0, match.start() - 5):match.start()]:
                    continue
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.slow  # asks git which files are tracked: a process
def test_cited_docs_exist():
    cited = set()
    for path in _tracked_text_files():
        cited.update(re.findall(r"\bdocs/[A-Za-z0-9_]+\.md", path.read_text(encoding="utf-8", errors="replace")))
    assert cited, "nothing cites docs/"
    missing = sorted(c for c in cited if not (REPO / c).is_file())
    assert not missing, missing


# The stage contract (plan, run, summarize, record; Params; the notebook's cell) is
# checked in tests/test_stage_contract.py.


# --------------------------------------------------------------------------- device seam
def _device_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch_npu" for a in node.names):
            hits.append(f"{node.lineno}: import torch_npu")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch_npu":
            hits.append(f"{node.lineno}: from torch_npu import")
        elif isinstance(node, ast.ImportFrom) and node.module == "torch" and any(
                a.name == "cuda" for a in node.names):
            hits.append(f"{node.lineno}: from torch import cuda")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "try_import", "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                and str(node.args[0].value).startswith("torch_npu"):
            hits.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Attribute) and ast.unparse(node).startswith("torch.cuda."):
            hits.append(f"{node.lineno}: {ast.unparse(node)}")
    return hits


def test_only_the_backend_seam_touches_torch_npu_and_torch_cuda():
    # The generated module is the seam of a *ported* tree (copied there, never imported
    # by hyport): it may not import hyport's seam, so it has its own.
    allowed = {PACKAGE / "backend.py", PACKAGE / "port" / "generated" / "flash_attn_ascend.py"}
    offenders = {str(p.relative_to(REPO)): _device_calls(p) for p in MODULES if p not in allowed}
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, offenders
    assert _device_calls(PACKAGE / "backend.py"), "the seam itself must be where they are"


def test_figures_never_switch_the_kernels_matplotlib_backend():
    """Figures are bare ``matplotlib.figure.Figure`` objects: ``matplotlib.use`` in a
    library function would move a user's whole kernel off the inline backend, and
    pyplot figures stay open (and show twice) in a notebook."""
    offenders = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            text = ast.unparse(node) if isinstance(node, (ast.Call, ast.Import, ast.ImportFrom)) else ""
            if text.startswith(("matplotlib.use(", "plt.subplots(", "plt.figure(")) or (
                    "matplotlib.pyplot" in text and path != PACKAGE / "display.py"):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {text}")
    assert offenders == []
