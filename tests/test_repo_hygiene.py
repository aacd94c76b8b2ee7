"""Repository rules: clean notebooks, install metadata in step, no torch pin."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no .ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_is_clean(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") for c in code), f"{path.name}: has outputs"
    assert all(c.get("execution_count") is None for c in code), f"{path.name}: has execution counts"
    tagged = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
    assert nb["metadata"].get("kernelspec", {}).get("name") == "python3"
    assert "widgets" not in nb["metadata"], f"{path.name}: saved widget state"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_papermill_sees_every_parameter(path):
    """papermill skips a parameter line it cannot parse (e.g. a comment holding '='),
    and then neither `-p` nor a profile can ever set it."""
    import ast

    import papermill

    nb = json.loads(path.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    tree = ast.parse("".join(cell["source"]))
    assigned = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]
    assert assigned, f"{path.name}: the parameters cell assigns nothing"
    assert all(isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.List, ast.Dict, ast.Tuple))
               for node in tree.body), f"{path.name}: only literal assignments belong in the parameters cell"
    assert sorted(papermill.inspect_notebook(str(path))) == sorted(assigned)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_name_is_a_stage(path):
    assert re.match(r"^\d{2}_[a-z0-9_]+\.ipynb$", path.name)


def test_environment_yml_names_the_same_packages_as_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda_names = {_name(d) for d in env["dependencies"] if isinstance(d, str)} - {"python", "pip"}
    env_names = {_name(r) for r in pip_section if not r.startswith("-")} | conda_names
    assert env_names == {_name(r) for r in project["dependencies"]}


def test_torch_is_never_pinned_in_pyproject():
    """`pip install -e .` on an Ascend host must not replace torch / torch_npu."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    for req in reqs:
        if _name(req) in ("torch", "torch-npu"):
            assert "==" not in req and "<" not in req, f"{req}: no pins or caps on torch"
    assert not any(_name(r) == "torch-npu" for r in reqs), "torch-npu is the host's own, never a dependency"
    assert not any(_name(r) == "torchvision" for r in reqs)


def test_seed_host_stack_satisfies_the_ranges():
    """Python 3.11, torch 2.8.0, transformers 4.57.0 (the seed's; its torch_npu 2.8.0.post1
    is the host's own, never installed by hyport)."""
    from packaging.requirements import Requirement

    seed = {"torch": "2.8.0", "torch-npu": "2.8.0.post1", "transformers": "4.57.0"}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"]
    for raw in reqs:
        req = Requirement(raw)
        if _name(req.name) in seed:
            assert req.specifier.contains(seed[_name(req.name)]), raw
    assert Requirement("x" + project["requires-python"].replace(" ", "")).specifier.contains("3.11")


def test_constraints_pin_exact_cpu_versions():
    pins = {}
    for line in (REPO / "constraints" / "cpu.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints/cpu.txt: {line!r} is not an exact pin"
            pins[_name(name)] = version
    assert pins["torch"] == "2.13.0"
    assert "torchvision" not in pins
    for name in ("transformers", "deepspeed", "papermill", "nbconvert", "jupyterlab", "ipywidgets"):
        assert name in pins


@pytest.mark.parametrize("path", sorted((REPO / "parameters").glob("*.yaml")), ids=lambda p: p.name)
def test_profiles_open_with_the_command_that_uses_them(path):
    first = path.read_text().splitlines()
    assert first[0].startswith("# ")
    assert any("hyport report" in line for line in first[:5] if line.startswith("#"))
    assert isinstance(yaml.safe_load(path.read_text()), dict)


def test_outputs_are_ignored_by_git():
    ignore = (REPO / ".gitignore").read_text().splitlines()
    assert "outputs/*" in ignore


def test_the_readmes_layout_names_every_package_and_every_module_it_names_exists():
    """The README's map is what a newcomer reads first: every package of hyport_lib is on it,
    and every ``name.py`` it names lies in the folder it is listed under (or, said of a module
    of hyport_lib, anywhere in it)."""
    block = (REPO / "README.md").read_text(encoding="utf-8").split("## Layout", 1)[1].split("```")[1]
    packages = sorted(p.name for p in (REPO / "hyport_lib").iterdir()
                      if p.is_dir() and (p / "__init__.py").is_file())
    assert len(packages) > 10
    assert [p for p in packages if not re.search(rf"(?<![\w/]){p}/", block)] == []
    folder, named, missing = REPO, [], []
    for line in block.splitlines():
        top = re.match(r"( {2})?(\w+)/\s", line)  # a folder's first line: what follows is in it
        if top:
            folder = REPO / "hyport_lib" / top.group(2) if top.group(1) else REPO / top.group(2)
        elif re.match(r" {0,2}\S", line):  # a module of hyport_lib's top, or a file of the repository's
            folder = REPO / "hyport_lib" if line.startswith("  ") else REPO
        for module in re.findall(r"(?<![\w/.])(\w+\.py)\b", line):
            named.append(module)
            inside = folder.is_relative_to(REPO / "hyport_lib")
            if not any(folder.rglob(module)) and not (inside and any((REPO / "hyport_lib").rglob(module))):
                missing.append(f"{folder.relative_to(REPO)}/{module}")
    assert len(named) > 5
    assert missing == []
