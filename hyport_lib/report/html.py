"""Executed notebook -> self-contained HTML that makes no network request.

Widgets are rendered statically (see README): nbconvert's widget renderer comes from a
CDN that air-gapped clusters cannot reach, and every notebook shows a static rendering
next to each widget. Widget views become a note, widget state is dropped, and the
template has no require.js / MathJax / mermaid / widget scripts.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

from hyport_lib.report.paths import relative_text
from hyport_lib.utils.files import atomic_write_text
from hyport_lib.utils.redact import scrub_text

if TYPE_CHECKING:
    import nbformat

TEMPLATE_DIR = Path(__file__).parent / "templates"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = ("[interactive widget: live in JupyterLab only; "
               "its static rendering is shown next to it]")


def staticize_widgets(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Copy of ``nb`` without widget state and with widget views as plain notes."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        for output in cell.get("outputs", []):
            data = output.get("data")
            if data and WIDGET_MIME in data:
                output["data"] = {"text/plain": WIDGET_NOTE}
    return nb


def nbconvert_template_dirs() -> list[str]:
    """Folders holding nbconvert's own templates (``lab``, ``base``...), wherever pip put them:
    ``pip install --target DIR`` (seen on a GPU host) puts them in ``DIR/share/jupyter``,
    where jupyter does not look ("No template sub-directory with name 'lab' found").

    Raises:
        RuntimeError: no ``lab`` template anywhere; names ``JUPYTER_PATH``.
    """
    import nbconvert
    from jupyter_core.paths import jupyter_path

    candidates = [Path(p) for p in jupyter_path("nbconvert", "templates")]
    package = Path(nbconvert.__file__).resolve().parent
    for up in (package.parent, *package.parents[:4]):  # site-packages, lib, prefix, ...
        candidates.append(up / "share" / "jupyter" / "nbconvert" / "templates")
    found = list(dict.fromkeys(str(c) for c in candidates if (c / "lab").is_dir()))
    if not found:
        raise RuntimeError("nbconvert's 'lab' template was not found next to nbconvert "
                           f"({package}) nor on the Jupyter data path; set JUPYTER_PATH to the "
                           "folder that holds nbconvert/templates/lab (e.g. <prefix>/share/jupyter)")
    return found


def notebook_to_html(notebook_path: Path, html_path: Path, *, run_dir: Path, show_inputs: bool = True,
                     title: str | None = None) -> Path:
    """Export ``notebook_path`` to an offline HTML file written atomically, its paths
    relative to ``run_dir`` (the notebook keeps them absolute)."""
    # Imported when a page is written, as nbconvert is: nbformat brings jsonschema, whose
    # format checkers build an RFC 3987 grammar on import (~3 s), which a report refusing
    # its input before any stage runs should not wait for.
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(notebook_path), as_version=4)
    nb = staticize_widgets(nb)
    exporter = HTMLExporter(
        template_name="hyport_offline",
        extra_template_basedirs=[str(TEMPLATE_DIR), *nbconvert_template_dirs()],
        exclude_input=not show_inputs,
        exclude_input_prompt=not show_inputs,
    )
    resources = {"metadata": {"name": title or Path(notebook_path).stem}}
    body, _ = exporter.from_notebook_node(nb, resources=resources)
    return atomic_write_text(html_path, relative_text(scrub_text(body), run_dir, "html"))
