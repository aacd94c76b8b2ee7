"""Dependency declarations: requirements files, pyproject.toml, setup.py, setup.cfg,
conda environment files, and ``pip install`` lines of shell scripts and Dockerfiles.

Every finding is category ``requirement`` at the exact line that names the package.
Included files (``-r other.txt``) are not followed: the tree walk reads them anyway.
"""

from __future__ import annotations

import ast
import re
from typing import Iterable, Optional

from hyport_lib.scan import rules
from hyport_lib.scan.hits import Hit, decode_source, hit_at, split_lines

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: A whole string that is one requirement: ``name[extras] specifiers ; marker`` or ``name @ url``.
_REQUIREMENT_RE = re.compile(
    r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]]*\])?\s*"
    r"(@\s*\S+|(===|==|>=|<=|~=|!=|<|>|=)\s*[^;\s,]+(\s*,\s*(===|==|>=|<=|~=|!=|<|>)\s*[^;\s,]+)*)?"
    r"\s*(;.*)?$")
_ARCHIVE_RE = re.compile(r"([^/\s]+?)(\.whl|\.tar\.gz|\.zip|\.git)(#.*)?$")
_TORCH_FAMILY = {"torch", "torchvision", "torchaudio", "pytorch"}
#: One install command in a shell line; its arguments end at the next ``&&``, ``;``, ``|``.
_INSTALL_RE = re.compile(r"\b(?:pip3?|uv pip|conda|mamba)\s+install\b([^;&|\n]*)")
#: The same, but only where a command starts (start of the string or after a shell
#: separator, then env assignments, ``sudo``, ``python -m``, a notebook ``!`` / ``%``):
#: Python strings are prose too, and "we dropped pip install flash-attn" is no command.
_COMMAND_INSTALL_RE = re.compile(
    r"(?:^|&&|\|\||[;|\n])\s*[!%]?\s*(?:[A-Za-z_]\w*=\S*\s+)*(?:sudo\s+)?"
    r"(?:(?:\S+\s+)?-m\s+)?(?:pip3?|uv\s+pip|conda|mamba)\s+install\b([^;&|\n]*)")
_INDEX_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links"}
_CONDA_CHANNEL_RE = re.compile(r"^[\w.-]+::")
_SETUP_CFG_KEYS = {"install_requires", "setup_requires", "tests_require"}


def requirement_spec(line: str) -> str:
    """The requirement of a requirements-file line: no comment, no ``-e``; empty for none."""
    spec = re.split(r"(^|\s)#", line, maxsplit=1)[0].strip()
    return spec.split(None, 1)[1] if spec.startswith(("-e ", "--editable ", "-e\t")) else spec


def requirement_name(spec: str) -> Optional[str]:
    """Distribution name a requirement line / URL / archive / conda spec refers to, or None."""
    spec = _CONDA_CHANNEL_RE.sub("", spec.strip().strip("'\""))
    egg = re.search(r"#egg=([A-Za-z0-9][\w.-]*)", spec)
    if egg:
        return egg.group(1)
    direct = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*@", spec)
    if direct:
        return direct.group(1)
    if "://" in spec or spec.startswith(("-", ".", "/")) or _ARCHIVE_RE.search(spec):
        target = spec.split()[-1] if spec.split() else ""
        archive = _ARCHIVE_RE.search(target)
        if archive is None:
            if spec.startswith("-"):
                return None  # an option such as --extra-index-url
            # a repository URL: its last path component (https://github.com/NVIDIA/apex.git@v1)
            repo = re.search(r"://\S*/([A-Za-z0-9][\w.-]*?)(?:\.git)?/?(?:[@#].*)?$", target)
            return repo.group(1) if repo else None
        # wheels and sdists: the name ends at the first "-" that precedes a digit
        return re.split(r"-(?=\d)", archive.group(1), maxsplit=1)[0]
    name = _NAME_RE.match(spec)
    return name.group(0) if name else None


def requirement_suggestion(spec: str) -> Optional[str]:
    """What to do about one requirement on Ascend, or None when it ports as it is."""
    name = requirement_name(spec)
    if name is not None:
        text = rules.package_suggestion(name)
        if text is not None:
            return text
    if rules.cuda_wheel_in(spec):
        if name is None or rules.normalize_dist_name(name) in _TORCH_FAMILY:
            return rules.CUDA_WHEEL_SUGGESTION
        return f"CUDA build of {name}: install its CPU / Ascend build (or drop it)"
    return None


def _hit(rel: str, lines: list[str], line: int, col: int, suggestion: str) -> Hit:
    return hit_at(rel, lines, line, col, rules.REQUIREMENT, suggestion)


def _line_hit(rel: str, lines: list[str], number: int, spec: str) -> Optional[Hit]:
    suggestion = requirement_suggestion(spec)
    if suggestion is None:
        return None
    col = max(lines[number - 1].find(spec.strip()[:20]), 0)
    return _hit(rel, lines, number, col, suggestion)


# --- requirements.txt ----------------------------------------------------------------
def scan_requirements_txt(text: str, rel: str) -> list[Hit]:
    """``requirements*.txt`` / ``constraints*.txt``: one requirement (or option) per line."""
    lines = split_lines(text)
    hits = []
    for number, raw in enumerate(lines, start=1):
        spec = requirement_spec(raw)
        hit = _line_hit(rel, lines, number, spec) if spec else None
        if hit:
            hits.append(hit)
    return hits


# --- pyproject.toml ------------------------------------------------------------------
def scan_pyproject(text: str, rel: str) -> tuple[list[Hit], Optional[str]]:
    """``(hits, error)`` for the dependencies of ``[project]``, ``[build-system]``,
    ``[dependency-groups]`` and ``[tool.poetry]``, each at the line that spells it; without
    a TOML reading every quoted requirement-like string is checked instead."""
    lines = split_lines(text)
    if tomllib is None:
        return _quoted_string_scan(rel, lines), None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return _quoted_string_scan(rel, lines), f"TOMLDecodeError: {exc}"
    hits, claimed = [], set()
    for spec in _pyproject_requirements(data):
        number = _find_line(lines, [f'"{spec}"', f"'{spec}'"], claimed)
        hit = _line_hit(rel, lines, number, spec) if number else None
        if hit:
            hits.append(hit)
    for name in _poetry_names(data):
        pattern = re.compile(rf"^\s*[\"']?{re.escape(name)}[\"']?\s*=")
        number = next((i for i, line in enumerate(lines, 1)
                       if pattern.match(line) and (i, name) not in claimed), None)
        if number and rules.package_suggestion(name):
            claimed.add((number, name))
            hits.append(_hit(rel, lines, number, lines[number - 1].find(name),
                             rules.package_suggestion(name)))
    return hits, None


def _pyproject_requirements(data: dict) -> Iterable[str]:
    project = _table(data, "project")
    yield from _strings(project.get("dependencies"))
    for extra in _table(project, "optional-dependencies").values():
        yield from _strings(extra)
    yield from _strings(_table(data, "build-system").get("requires"))
    for group in _table(data, "dependency-groups").values():
        yield from _strings(group)  # {include-group = ...} entries are not requirements


def _poetry_names(data: dict) -> Iterable[str]:
    poetry = _table(_table(data, "tool"), "poetry")
    tables = [_table(poetry, "dependencies"), _table(poetry, "dev-dependencies")]
    tables += [_table(g, "dependencies") for g in _table(poetry, "group").values()
               if isinstance(g, dict)]
    for table in tables:
        yield from table


def _table(data: dict, key: str) -> dict:
    """``data[key]`` when it is a table; an empty one otherwise (a malformed file)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _strings(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _find_line(lines: list[str], needles: list[str], claimed: set) -> Optional[int]:
    """First line (1-based) holding one of ``needles`` and not yet claimed for them (claims
    are per needle: a spec listed twice finds its two lines)."""
    for number, line in enumerate(lines, start=1):
        for needle in needles:
            if (number, needle) not in claimed and needle in line:
                claimed.add((number, needle))
                return number
    return None


_QUOTED_RE = re.compile(r"""(["'])([^"'\n]+)\1""")
_SINGLE_VALUE_RE = re.compile(r"""^\s*[\w."'-]+\s*=\s*$""")


def _quoted_string_scan(rel: str, lines: list[str]) -> list[Hit]:
    """Quoted strings that are whole requirement specs, outside ``key = "value"`` lines
    (the fallback for files that do not parse)."""
    hits = []
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("#"):
            continue
        for match in _QUOTED_RE.finditer(line):
            if _SINGLE_VALUE_RE.match(line[:match.start()]):
                continue  # `name = "cuda-vlm"`: requirements stand in lists
            if _REQUIREMENT_RE.match(match.group(2)):
                suggestion = requirement_suggestion(match.group(2))
                if suggestion:
                    hits.append(_hit(rel, lines, number, match.start(2), suggestion))
    return hits


# --- setup.py ------------------------------------------------------------------------
def scan_setup_py(data: bytes, rel: str) -> list[Hit]:
    """Requirement strings of ``setup.py``: whole requirement specs that stand where
    requirements stand (a list / tuple / set element, a dict value, a ``*require*``
    keyword's value), so ``name="cuda-vlm"`` is skipped. An unparsable file is checked
    string by string."""
    text, _ = decode_source(data)
    lines = split_lines(text)
    try:
        tree = ast.parse(text, filename=rel)
    except (SyntaxError, ValueError, RecursionError):
        return _quoted_string_scan(rel, lines)
    hits = []
    for node in _requirement_positions(tree):
        is_string = isinstance(node, ast.Constant) and isinstance(node.value, str)
        if is_string and _REQUIREMENT_RE.match(node.value):
            suggestion = requirement_suggestion(node.value)
            if suggestion:
                hits.append(_hit(rel, lines, node.lineno, node.col_offset, suggestion))
    return hits


def _requirement_positions(tree: ast.AST) -> Iterable[ast.expr]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            yield from node.elts
        elif isinstance(node, ast.Dict):
            yield from node.values
        elif isinstance(node, ast.keyword) and node.arg and "require" in node.arg:
            yield node.value


# --- setup.cfg -----------------------------------------------------------------------
def scan_setup_cfg(text: str, rel: str) -> list[Hit]:
    """``install_requires`` / ``setup_requires`` / ``tests_require`` of ``[options]``, and
    ``[options.extras_require]``."""
    lines = split_lines(text)
    hits, section, key = [], "", None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip() or raw.lstrip()[0] in "#;":
            continue
        line = re.split(r"\s[#;]\s", raw, maxsplit=1)[0]
        header = re.match(r"^\[([^\]]+)\]", line)
        if header:
            section, key = header.group(1).strip(), None
            continue
        assignment = re.match(r"^([A-Za-z_][\w.-]*)\s*[=:]\s*(.*)$", line)
        if assignment:
            key, value = assignment.group(1), assignment.group(2)
        elif line[:1].isspace():
            value = line  # continuation of the current key's list
        else:
            continue
        wanted = (section == "options.extras_require"
                  or (section == "options" and key in _SETUP_CFG_KEYS))
        if wanted and value.strip():
            hit = _line_hit(rel, lines, number, value.strip())
            if hit:
                hits.append(hit)
    return hits


# --- conda environment files ---------------------------------------------------------
def scan_environment_yml(text: str, rel: str) -> list[Hit]:
    """``- spec`` items under the top-level ``dependencies:`` key (pip sub-list included)."""
    lines = split_lines(text)
    hits, inside = [], False
    for number, raw in enumerate(lines, start=1):
        if re.match(r"^\S", raw):
            inside = raw.startswith("dependencies")
            continue
        item = re.match(r"^\s*-\s*(.+?)\s*(#.*)?$", raw)
        if inside and item and not item.group(1).rstrip().endswith(":"):
            hit = _line_hit(rel, lines, number, item.group(1))
            if hit:
                hits.append(hit)
    return hits


# --- shell scripts and Dockerfiles ---------------------------------------------------
def install_suggestions(text: str, *, commands_only: bool = False) -> list[tuple[str, str]]:
    """``(package token, suggestion)`` for each package of every install command in ``text``
    that does not port as it is; ``commands_only``: only where a command starts (Python
    strings may be prose)."""
    found: list[tuple[str, str]] = []
    pattern = _COMMAND_INSTALL_RE if commands_only else _INSTALL_RE
    for install in pattern.finditer(text):
        seen = set()  # `torch+cu121 --index-url .../cu121` is one finding, not two
        previous = ""
        for token in install.group(1).split():
            option, previous = previous, token
            if token.startswith("-") and "://" not in token:
                continue
            token = token.strip("'\"")
            # an index URL is read with its option, as in requirements files
            spec = f"{option} {token}" if option in _INDEX_OPTIONS else token
            suggestion = requirement_suggestion(spec) if token else None
            if suggestion and suggestion not in seen:
                seen.add(suggestion)
                found.append((token, suggestion))
    return found


def install_hits(rel: str, lines: list[str], number: int, *, note: str = "") -> list[Hit]:
    """Requirement hits for the install commands of line ``number`` (1-based), one per
    package, each at the column of its package; ``note`` is appended to the suggestions."""
    raw = lines[number - 1]
    hits = []
    for token, suggestion in install_suggestions(raw):
        col = max(raw.find(token), 0)
        hits.append(_hit(rel, lines, number, col, suggestion + note))
    return hits


def scan_shell(text: str, rel: str) -> list[Hit]:
    """``pip install`` / ``conda install`` arguments, and CUDA / NCCL variables set in scripts."""
    lines = split_lines(text)
    hits = []
    for number, raw in enumerate(lines, start=1):
        if raw.lstrip().startswith("#"):
            continue
        hits += install_hits(rel, lines, number)
        for match in rules.ENV_VAR_RE.finditer(raw):
            category, suggestion = rules.env_var_rule(match.group(1))
            hits.append(hit_at(rel, lines, number, match.start(1), category, suggestion))
    return hits
