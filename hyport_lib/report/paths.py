"""Paths as the report shows them: under the run folder ``<run>/...``, under the repository
``<repo>/...``, hyport's cache ``<cache>/...``, the Python environment ``<venv>/...``, the
temporary folder ``<tmp>/...`` and the home folder ``~/...``, so that a page or a draft sent
elsewhere names no local folder (``/home/<user>/...``). The run's data (notebooks, results)
keeps its absolute paths; only what the report writes for people is rewritten, as a last
pass over the written text (:func:`relative_text`), so a value shown anywhere (a table, a
log tail, a figure's caption) is caught.
"""

from __future__ import annotations

import html
import os
import re
import sys
import tempfile
import urllib.parse
from pathlib import Path
from typing import Optional

import hyport_lib
from hyport_lib.models.model_cache import default_cache_root

RUN, REPO, CACHE, VENV, TMP, HOME = "<run>", "<repo>", "<cache>", "<venv>", "<tmp>", "~"
#: A root ends where its last folder name ends: ``/x/run-1`` is not the start of
#: ``/x/run-10`` nor of ``/x/run-1.zip``, but is of ``/x/run-1/a`` and of "``/x/run-1``.".
_NAME_CHAR = r"[A-Za-z0-9_\-]"
_BEFORE, _AFTER = rf"(?<!{_NAME_CHAR})(?<!\.)", rf"(?!{_NAME_CHAR}|\.{_NAME_CHAR})"
#: A Markdown code fence (``` or ~~~), which opens or closes a code block.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
#: A run of backticks, which opens or closes inline code.
_TICKS = re.compile(r"`+")


def default_profiles_dir() -> Path:
    """``parameters/`` of the checkout: the bundled profiles, named by their stem."""
    return Path(hyport_lib.__file__).resolve().parents[1] / "parameters"


def named_folders(run_dir: Path) -> list[tuple[Path, str]]:
    """(folder, its name in the report): the run, the repository, hyport's cache, the virtual
    environment (only one: a system Python's prefix, ``/usr``, is no local folder), the
    temporary folder and the home folder. A folder that is the file system's root names
    nothing."""
    folders = [(run_dir, RUN), (default_profiles_dir().parent, REPO), (default_cache_root(), CACHE)]
    if sys.prefix != sys.base_prefix:
        folders.append((Path(sys.prefix), VENV))
    folders += [(Path(tempfile.gettempdir()), TMP), (Path.home(), HOME)]
    return [(folder, name) for folder, name in folders if Path(os.path.abspath(folder)).parent != Path(os.path.abspath(folder))]


def _roots(run_dir: Path) -> list[tuple[str, str]]:
    """(folder, its name) of :func:`named_folders`, each as written and as resolved (a
    symlinked /tmp), the deepest first: a folder inside another (the run under the
    repository or the temporary folder, the cache under the home folder) keeps its own name."""
    roots = dict.fromkeys((spelled(folder), name) for folder, name in named_folders(run_dir)
                          for spelled in (os.path.abspath, os.path.realpath))
    return sorted(roots, key=lambda root: len(root[0]), reverse=True)


def shown_path(value: str, run_dir: Path) -> str:
    """``<run>/train/smoke``, ``<repo>/parameters/x.yaml``, ``~/models/x``, anything else as
    it is (a model folder outside them, which the reader may need to reproduce the run)."""
    if not isinstance(value, str) or not os.path.isabs(value):
        return value
    path = Path(value)
    for root, name in _roots(run_dir):
        if path == Path(root):
            return name
        if path.is_relative_to(root):
            return f"{name}/{path.relative_to(root).as_posix()}"
    return value


def shown_profile(profile: Optional[str], run_dir: Path) -> Optional[str]:
    """The profile as the index and the drafts name it: by its name when bundled, else by a
    path under the run or the repository, else by its file name, never a local absolute
    path; None without one."""
    if not profile:
        return None
    path = Path(profile)
    if path.parent == default_profiles_dir():
        return path.stem
    shown = shown_path(str(path), run_dir)
    return shown if shown.startswith((RUN, REPO)) else f"…/{path.name}"


def _pattern(forms: dict[str, str]) -> re.Pattern:
    alternatives = "|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True))
    return re.compile(f"{_BEFORE}(?:{alternatives}){_AFTER}")


def relative_text(text: str, run_dir: Path, markup: str) -> str:
    """``text`` (a page, ``markup="html"``, or a draft, ``"markdown"``) with its paths named
    as :func:`named_folders` names them. In HTML the folders are also found HTML-escaped and
    URL-quoted, and named in the same form. In Markdown the name is ``<run>`` in code and
    ``\\<run>`` in prose (where ``<run>`` would be read as an HTML tag, ``~`` as a strikethrough)."""
    if markup not in ("html", "markdown"):
        raise ValueError(f"markup must be 'html' or 'markdown', not {markup!r}")
    for root, name in _roots(run_dir):
        if markup == "html":
            # where two forms are one (no character to escape), the plain one's name wins
            forms = {urllib.parse.quote(root): urllib.parse.quote(name), html.escape(root): html.escape(name),
                     root: html.escape(name)}
            text = _pattern(forms).sub(lambda m: forms[m.group(0)], text)
        else:
            text = _markdown_named(text, _pattern({root: name}), name)
    return text


def _code_spans(line: str) -> list[tuple[int, int]]:
    """Where a line's inline code lies: a run of backticks opens a span that the next run
    of the same length closes (CommonMark: `` `a` `` in a double-backtick span is code)."""
    runs, spans, i = list(_TICKS.finditer(line)), [], 0
    while i < len(runs):
        closer = next((j for j in range(i + 1, len(runs)) if len(runs[j].group()) == len(runs[i].group())), None)
        if closer is None:
            i += 1
            continue
        spans.append((runs[i].end(), runs[closer].start()))
        i = closer + 1
    return spans


def _markdown_named(text: str, pattern: re.Pattern, name: str) -> str:
    """``pattern``'s matches in Markdown ``text`` replaced by ``name``, escaped outside code
    (a fenced block, closed only by a fence of its own character at least as long; or an
    inline code span)."""
    lines, fence = [], ""  # the open block's fence, "" outside one
    for line in text.split("\n"):
        found = _FENCE.match(line)
        if fence or found:
            lines.append(pattern.sub(name, line))
        else:
            spans = _code_spans(line)
            lines.append(pattern.sub(
                lambda m, spans=spans: name if any(a <= m.start() < b for a, b in spans) else "\\" + name, line))
        if found and not fence:
            fence = found.group(1)
        elif found and found.group(1)[0] == fence[0] and len(found.group(1)) >= len(fence) \
                and not line.strip()[len(found.group(1)):].strip():
            fence = ""  # a closing fence carries no info string
    return "\n".join(lines)
