"""The house rules of the code base, checked: one shape per stage, no import circles,
short modules, one device seam, no document cited outside the repository."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "hyport_lib"
MAX_MODULE_LINES = 420  # "about 400"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


NAMES = {_module_name(p): p for p in MODULES}


def _module_level_imports(path: Path, root: Path = REPO, names=NAMES) -> set[str]:
    """Modules of ``names`` imported when ``path`` is imported (function bodies excluded,
    ``if TYPE_CHECKING`` blocks included: a circle there is still a circle)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes):
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    # ``from pkg import module`` imports the module; ``from pkg import name``
                    # imports pkg.
                    found.add(sub if sub in names else base)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    # A parent package is always imported before its modules: that edge is Python's, not
    # a circle of ours.
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    return {m for m in found if m in names and m != name and m not in ancestors}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
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


def test_no_import_circle_in_hyport_lib():
    cycles = _cycles({name: _module_level_imports(path) for name, path in NAMES.items()})
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_circle_finder_finds_a_planted_circle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\n"
                                      "if TYPE_CHECKING:\n    from pkg.a import thing\n")
    (pkg / "c.py").write_text("def lazy():\n    from pkg import a\n")  # lazy: not an edge
    paths = sorted(pkg.rglob("*.py"))
    names = {_module_name(p, tmp_path): p for p in paths}
    graph = {n: _module_level_imports(p, tmp_path, names) for n, p in names.items()}
    assert graph["pkg.c"] == set()
    assert _cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_module_is_short(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.name}: {lines} lines; split it by concern"


def _tracked_text_files():
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for rel in out:
        path = REPO / rel
        if path.suffix in (".py", ".md", ".ipynb", ".yaml", ".yml", ".sh", ".toml", ".txt", ".cfg",
                           ".j2", ".json") or path.parent.name == ".ci":
            if path.is_file():
                yield path


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


def test_cited_docs_exist():
    cited = set()
    for path in _tracked_text_files():
        cited.update(re.findall(r"\bdocs/[A-Za-z0-9_]+\.md", path.read_text(encoding="utf-8", errors="replace")))
    assert cited, "nothing cites docs/"
    missing = sorted(c for c in cited if not (REPO / c).is_file())
    assert not missing, missing


# --------------------------------------------------------------------------- stage shape
def _stage_modules():
    return sorted(p for p in PACKAGE.glob("*/stage.py"))


def test_every_notebook_has_one_stage_module_with_the_same_shape():
    from hyport_lib.stages import discover_stages

    by_id = {}
    for path in _stage_modules():
        module = importlib.import_module(_module_name(path))
        assert re.fullmatch(r"\d{2}_[a-z0-9_]+", module.STAGE), path
        assert module.STAGE not in by_id, f"two stage modules claim {module.STAGE}"
        by_id[module.STAGE] = module
        for fn in ("run", "summarize", "record"):
            assert callable(getattr(module, fn, None)), f"{path}: no {fn}()"
        params = inspect.signature(module.record).parameters
        first, *rest = params.values()
        assert first.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, f"{path}: record(result, ...)"
        assert "directory" in params and params["directory"].kind is inspect.Parameter.KEYWORD_ONLY
    stages = {s.id for s in discover_stages()}
    assert stages == set(by_id), f"notebooks {sorted(stages)} vs stage modules {sorted(by_id)}"


@pytest.mark.parametrize("path", sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_notebook_records_through_its_stage_module(path):
    """The notebook calls the stage function and ``stage.record``: no sequence written twice."""
    import json

    code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                     if c["cell_type"] == "code")
    assert re.search(r"from hyport_lib\.\w+ import (\w+, )*stage\b", code), path.name
    assert "stage.record(" in code and "stage.run" in code, path.name


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
    allowed = {PACKAGE / "backend.py"}
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
