"""Plugin: throw-away stages for the report's tests. A stage is a notebook plus its
package, so a planted notebook comes with a package ``hyport_lib.<name>`` in a temporary
folder."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Callable

import nbformat
import pytest

import hyport_lib

SITECUSTOMIZE = '''
    """Test only: every process started under the test (the papermill kernel, the pre-run
    check, ``python -m hyport_lib``) finds the planted stage packages."""

    import os

    import hyport_lib

    hyport_lib.__path__.append(os.environ["HYPORT_TEST_EXTRA_PACKAGES"])
'''

#: A planted stage's package: parameters typed by their defaults, a plan that accepts them.
PARAMS_PY = '''
    from dataclasses import dataclass

    from hyport_lib.params import StageParams, param


    @dataclass
    class Params(StageParams):
    {fields}
'''
STAGE_PY = '''
    STAGE = "{stage}"


    def plan(params):
        return params
'''


def _notebook(path: Path, params: str, body: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cell = nbformat.v4.new_code_cell(params)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# test stage"), cell, nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, str(path))
    return path


@pytest.fixture
def stage_packages(tmp_path, monkeypatch) -> Path:
    """The folder of planted stage packages, importable here and in child processes."""
    packages = tmp_path / "packages"
    packages.mkdir()
    # A child is a new process: a sitecustomize on its PYTHONPATH extends the package path
    # there as monkeypatch does here.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE).lstrip())
    monkeypatch.setenv("HYPORT_TEST_EXTRA_PACKAGES", str(packages))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setattr(hyport_lib, "__path__", [*hyport_lib.__path__, str(packages)])
    yield packages
    planted = {p.name for p in packages.iterdir()}
    for name in [n for n in sys.modules if n.startswith("hyport_lib.") and n.split(".")[1] in planted]:
        del sys.modules[name]


@pytest.fixture
def plant_stage(stage_packages) -> Callable[..., Path]:
    """``plant_stage(folder, "01_good", body, level=1)``: the notebook ``folder/01_good.ipynb``
    (its ``parameters`` cell ``device`` and the keywords, then ``body``) and its package,
    whose ``Params`` declares the same names."""

    def plant(folder: Path, stage: str, body: str, **params) -> Path:
        params = {"device": "auto", **params}
        package = stage_packages / stage.partition("_")[2]
        package.mkdir()
        (package / "__init__.py").write_text(f'"""The planted stage {stage}."""\n')
        fields = "\n".join(f"    {key}: {type(value).__name__} = param({value!r}, {key!r})"
                           for key, value in params.items())
        (package / "params.py").write_text(textwrap.dedent(PARAMS_PY).lstrip().format(fields=fields))
        (package / "stage.py").write_text(textwrap.dedent(STAGE_PY).lstrip().format(stage=stage))
        (package / "show.py").write_text('"""No hooks: the report shows the recorded headline."""\n')
        folder.mkdir(exist_ok=True)
        cell = "\n".join(f"{key} = {value!r}" for key, value in params.items())
        return _notebook(folder / f"{stage}.ipynb", cell, body)

    return plant
