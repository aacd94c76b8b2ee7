"""``scan_path``: walk a tree (or take one file) and send each file to its scanner."""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from pathlib import Path
from typing import Iterable, Iterator, Optional

from hyport_lib.scan import dependencies, rules
from hyport_lib.scan.hits import Hit, ScanReport, hit_at, split_lines
from hyport_lib.scan.python_code import scan_python

#: Directory or file names (glob patterns; a pattern with "/" matches the relative path)
#: that are never scanned: tooling, virtual environments, build output.
DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".tox", ".nox",
    ".mypy_cache", ".pytest_cache", ".ipynb_checkpoints", "*.egg-info", ".eggs",
    "site-packages", "build", "dist",
)

_REQUIREMENTS_RE = re.compile(r"^(.*[-_.])?(requirements?|constraints)([-_.].*)?\.(txt|in)$")
_ENVIRONMENT_RE = re.compile(r"^(environment|conda)([-_.].*)?\.ya?ml$")
_SHELL_RE = re.compile(r"^(.*\.sh|Dockerfile([-_.].*)?|.*\.dockerfile)$")
#: For a file named on the command line, the extension is enough.
_EXPLICIT_KINDS = {".py": "python", ".txt": "requirements", ".in": "requirements",
                   ".toml": "pyproject", ".cfg": "setup_cfg", ".yml": "environment",
                   ".yaml": "environment", ".sh": "shell"}


def file_kind(path: Path, explicit: bool = False) -> Optional[str]:
    """Which scanner reads ``path``, or None when the scan ignores it."""
    name = path.name
    if name.endswith(".py"):
        return "python"
    if name == "pyproject.toml":
        return "pyproject"
    if name == "setup.cfg":
        return "setup_cfg"
    in_requirements_dir = path.parent.name == "requirements" and path.suffix in (".txt", ".in")
    if _REQUIREMENTS_RE.match(name) or in_requirements_dir:
        return "requirements"
    if _ENVIRONMENT_RE.match(name):
        return "environment"
    if _SHELL_RE.match(name):
        return "shell"
    return _EXPLICIT_KINDS.get(path.suffix) if explicit else None


def scan_path(path: str | os.PathLike, *, exclude: Iterable[str] = DEFAULT_EXCLUDE) -> ScanReport:
    """Scan a source tree (or one file, its kind taken from the extension); hits name files
    relative to ``path`` (to its folder for a file). ``exclude``: glob patterns of names to
    skip (one holding ``/`` matches the relative path). Files that do not parse are reported,
    never fatal; FileNotFoundError for a missing ``path``, ValueError for a file of a kind the
    scan does not read."""
    root = Path(path)
    if not root.exists():
        link = not_regular(root) if root.is_symlink() else None
        raise FileNotFoundError(f"scan_path: path {str(path)!r} {link or 'does not exist'}")
    exclude = tuple(exclude)
    why = not_regular(root) if not root.is_dir() else None
    if why:  # a FIFO named on the command line would block the read forever
        raise ValueError(f"scan_path: {str(path)!r} is not a regular file ({why})")
    if root.is_file():
        kind = file_kind(root, explicit=True)
        if kind is None:
            raise ValueError(f"scan_path: {str(path)!r} is not a Python, requirements, pyproject, "
                             "setup.cfg, environment or shell file")
        base, targets = root.parent, [(root, kind)]
    else:
        base, targets = root, ((f, file_kind(f)) for f in _walk(root, exclude))
    report = ScanReport(root=str(path))
    for file, kind in targets:
        if kind is None:
            continue
        rel = file.relative_to(base).as_posix()
        why = not_regular(file) or _outside(file, base)
        if why:  # a FIFO named *.py would block the read forever
            report.skipped.append((rel, why))
            continue
        report.files_scanned += 1
        hits, error = _scan_file(file, rel, kind)
        report.hits.extend(_apply_pragmas(file, hits))
        if error is not None:
            report.unparsable.append((rel, error))
    report.hits.sort()
    report.pinned = pinned_flash_attn(report.hits)
    return report


_FLASH_PIN_RE = re.compile(r"flash[-_]attn\s*((?:[=<>!~]=?|===)\s*[\w.*+]+(?:\s*,\s*(?:[=<>!~]=?)\s*[\w.*+]+)*)")
#: A wheel or sdist file name (``flash_attn-2.5.8+cu122torch2.3...whl``), the usual way
#: flash-attn gets pinned, or a git tag of its repository (``flash-attention.git@v2.5.8``).
_FLASH_ARCHIVE_RE = re.compile(r"flash[-_]attn-(\d+(?:\.\d+)+(?:\.post\d+)?)[^/\s]*\.(?:whl|tar\.gz|zip)\b")
_FLASH_GIT_RE = re.compile(r"flash-attention(?:\.git)?@v?(\d+(?:\.\d+)+(?:\.post\d+)?)\b")


def pinned_flash_attn(hits) -> dict[str, str]:
    """The flash-attn version specifier the project's requirements pin (first one found):
    a specifier (``==2.6.3``, ``<2.7``), or ``==X`` for a wheel file or git tag."""
    for hit in hits:
        if hit.category == rules.REQUIREMENT:
            match = _FLASH_PIN_RE.search(hit.snippet)
            if match:
                spec = re.sub(r"\s+", "", match.group(1))
                return {"flash-attn": f"{spec} ({hit.file}:{hit.line})"}
            match = _FLASH_ARCHIVE_RE.search(hit.snippet) or _FLASH_GIT_RE.search(hit.snippet)
            if match:
                return {"flash-attn": f"=={match.group(1)} ({hit.file}:{hit.line})"}
    return {}


def _outside(file: Path, base: Path) -> Optional[str]:
    """A link out of the scanned folder is named, never read: what it points at (a
    ``~/.bashrc`` with a token, say) must not reach a shareable report."""
    try:
        file.resolve().relative_to(base.resolve())
    except ValueError:
        return "symlink out of the scanned folder: not read"
    return None


def not_regular(path: Path) -> Optional[str]:
    """Why ``path`` is not a regular file to read, or None when it is one."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if path.is_symlink():
            return "symlink loop" if exc.errno == 40 else f"dangling symlink ({exc.strerror})"
        return f"unreadable ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    kind = "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else \
        "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
    return f"{kind}: not read"


def _walk(root: Path, exclude: tuple[str, ...]) -> Iterator[Path]:
    for folder, dirnames, filenames in os.walk(root):
        here = Path(folder)
        dirnames[:] = sorted(d for d in dirnames if not _excluded(here / d, root, exclude))
        for name in sorted(filenames):
            if not _excluded(here / name, root, exclude):
                yield here / name


def _excluded(path: Path, root: Path, patterns: tuple[str, ...]) -> bool:
    rel = path.relative_to(root).as_posix()
    return any(fnmatch.fnmatch(rel if "/" in p else path.name, p) for p in patterns)


_PRAGMA = "hyport-scan:"
# Only in a comment (after a "#"), so that prose about the pragmas is not one.
_IGNORE_LINE_RE = re.compile("#.*" + _PRAGMA + r"\s*ignore\b")
_IGNORE_FILE_RE = re.compile("#.*" + _PRAGMA + r"\s*ignore-file\b")
_PRAGMA_FILE_LINES = 10


def _apply_pragmas(file: Path, hits: list[Hit]) -> list[Hit]:
    """Drop findings the code marks as deliberate (``hyport-scan: ignore`` in a comment on
    the line, ``ignore-file`` in the first ten lines); unparsable files are always reported."""
    if not hits:
        return hits
    try:
        text = file.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return hits
    if _PRAGMA not in text:
        return hits
    lines = split_lines(text)
    if any(_IGNORE_FILE_RE.search(line) for line in lines[:_PRAGMA_FILE_LINES]):
        return [h for h in hits if h.category == rules.UNPARSABLE]
    return [h for h in hits if h.category == rules.UNPARSABLE
            or not (0 < h.line <= len(lines) and _IGNORE_LINE_RE.search(lines[h.line - 1]))]


def _scan_file(file: Path, rel: str, kind: str) -> tuple[list[Hit], Optional[str]]:
    try:
        data = file.read_bytes()
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc.strerror or exc}"
        return [Hit(rel, 1, 0, rules.UNPARSABLE, "", f"{error}; not scanned")], error
    if kind == "python":
        hits, error = scan_python(data, rel, package_strings=file.name != "setup.py")
        if file.name == "setup.py":
            hits += dependencies.scan_setup_py(data, rel)
        return hits, error
    text = data.decode("utf-8", errors="replace")
    if kind == "pyproject":
        hits, error = dependencies.scan_pyproject(text, rel)
        if error is not None:
            line = int(m.group(1)) if (m := re.search(r"line (\d+)", error)) else 1
            hits.append(hit_at(rel, split_lines(text), line, 0, rules.UNPARSABLE,
                               f"{error}; quoted requirement strings checked instead"))
        return hits, error
    scanner = {
        "requirements": dependencies.scan_requirements_txt,
        "setup_cfg": dependencies.scan_setup_cfg,
        "environment": dependencies.scan_environment_yml,
        "shell": dependencies.scan_shell,
    }[kind]
    return scanner(text, rel), None
