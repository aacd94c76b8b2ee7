"""What the port's rewrite needs to know of a Python file before LibCST sees any of it.

LibCST is pure Python (a 100 KB file costs seconds, hundreds of MB, and holds off Ctrl-C
while it parses), so :func:`plan` cuts the file with :mod:`ast` into one segment per
top-level statement and only segments holding a :data:`TRIGGER_WORDS` word (or the file's
own name for ``torch.cuda``) go through LibCST. The port's other ast questions live here too.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from hyport_lib.scan.ast_tests import is_cuda_guards
from hyport_lib.scan.rules import UNPORTABLE_MODULES

#: Every rule of :class:`~hyport_lib.port.codemod.PortTransformer` starts from one of these words.
TRIGGER_WORDS = ("cuda", "nccl", "flash", "jit", "cpp_extension", *UNPORTABLE_MODULES)
_RELATIVE_IMPORT = re.compile(r"\bfrom\s+\.")
_ESCAPE = re.compile(r"\\[xuUN0-7]")  # a string that may spell a trigger word in escapes


class UnparsableSource(ValueError):
    """The file is not Python this interpreter parses; ``str()`` names line and reason."""


@dataclass
class Segment:
    """Lines ``[first_line, first_line + text.count("\\n"))`` of the file (1-based)."""

    first_line: int
    text: str
    needs_rewrite: bool


@dataclass
class SourcePlan:
    """A file cut into segments, with what the rewrite must know of the whole file."""

    segments: list[Segment]
    #: segments holding the docstring and the first block of imports, and the statement
    #: after them: the part of the file that LibCST's AddImportsVisitor reads and edits.
    header_count: int
    guard_positions: set[tuple[int, int]] = field(default_factory=set)
    torch_names: set[str] = field(default_factory=lambda: {"torch"})
    cuda_names: set[str] = field(default_factory=set)


def parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise UnparsableSource(f"line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:  # a NUL byte
        raise UnparsableSource(str(exc)) from None


def _aliases(statements: list[ast.stmt]) -> tuple[set[str], set[str]]:
    """The names for the torch module and for ``torch.cuda`` the statements bind,
    wherever in them: a function may use a name the module imports below it."""
    torch_names, cuda_names = {"torch"}, set()
    for node in (n for statement in statements for n in ast.walk(statement)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name == "torch":
                    torch_names.add(alias.asname)
                elif alias.asname and alias.name == "torch.cuda":
                    cuda_names.add(alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.module == "torch" and not node.level:
            cuda_names |= {a.asname or "cuda" for a in node.names if a.name == "cuda"}
    return torch_names, cuda_names


def _header_count(body: list[ast.stmt], starts: list[int]) -> int:
    """How many top-level statements AddImportsVisitor reads: a docstring (or
    ``__strict__``), the imports right after it, and the statement after those (it may
    get a blank line before it). Statements sharing a line count as one segment."""
    index = 0
    if body and (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                 and isinstance(body[0].value.value, str)
                 or isinstance(body[0], ast.Assign) and len(body[0].targets) == 1
                 and isinstance(body[0].targets[0], ast.Name)
                 and body[0].targets[0].id == "__strict__"):
        index = 1
    while index < len(body) and isinstance(body[index], (ast.Import, ast.ImportFrom)):
        index += 1
    last = min(index, len(body) - 1)  # the statement after the imports, when there is one
    if last < 0:
        return 0
    line = _first_line(body[last])
    return sum(1 for start in starts if start <= line)


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", None) or []
    return min([node.lineno] + [d.lineno for d in decorators])


def plan(source: str) -> SourcePlan:
    """Cut ``source`` into segments and mark the ones the rewrite must see (UnparsableSource
    when it is not Python)."""
    tree = parse(source)
    lines = source.split("\n")
    lines = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    starts = sorted({_first_line(node) for node in tree.body} | {1})
    if re.search(r"\r(?!\n)", source):
        starts = [1]  # a lone CR ends a line for ast, not for the cut below: one segment
    bounds = list(zip(starts, starts[1:] + [len(lines) + 1]))
    texts = ["".join(lines[first - 1:end - 1]) for first, end in bounds]
    # the statements of each segment (several when they share a line), by one pass in order
    statements: list[list[ast.stmt]] = [[] for _ in bounds]
    index = 0
    for node in tree.body:
        while index + 1 < len(bounds) and _first_line(node) >= bounds[index][1]:
            index += 1
        statements[index].append(node)
    # Whole-file questions, asked only of the segments that can answer them: the walk of
    # a whole 1 MB tree in Python takes seconds.
    torch_names, cuda_names = _aliases([n for text, group in zip(texts, statements)
                                        if "import" in text for n in group])
    guard_positions = _guard_positions(source, [n for text, group in zip(texts, statements)
                                                if "is_cuda" in text for n in group])
    words = re.compile("|".join([re.escape(w) for w in TRIGGER_WORDS]
                                + [rf"\b{re.escape(n)}\b" for n in sorted(cuda_names)]))
    segments = [Segment(first, text, bool(words.search(text) or _ESCAPE.search(text)))
                for (first, _), text in zip(bounds, texts)]
    return SourcePlan(segments, _header_count(tree.body, starts), guard_positions, torch_names,
                      cuda_names)


def _guard_positions(source: str, statements: list[ast.stmt]) -> set[tuple[int, int]]:
    """(line, column) of each ``.is_cuda`` attribute the scan calls an attention guard (judged
    by its enclosing function and class, all within its top-level statement)."""
    if not statements:
        return set()
    tree = ast.Module(body=statements, type_ignores=[])
    guards = is_cuda_guards(tree)
    lines = source.splitlines()
    found = set()
    for node in ast.walk(tree) if guards else ():
        if isinstance(node, ast.Attribute) and id(node) in guards:
            line = lines[node.lineno - 1] if node.lineno <= len(lines) else ""
            # ast counts UTF-8 bytes, LibCST characters
            column = len(line.encode("utf-8", "surrogatepass")[:node.col_offset]
                         .decode("utf-8", "replace"))
            found.add((node.lineno, column))
    return found


def uses_relative_imports(source: str) -> bool:
    """Whether the file imports siblings with ``from .x import`` (then it is run as part of
    a package, as transformers runs remote code)."""
    if not _RELATIVE_IMPORT.search(source):
        return False  # no need to parse: nothing reads like a relative import
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))


def unpad_arities(source: str) -> set[int]:
    """How many values the file unpacks from ``unpad_input(...)`` (4 before flash-attn
    2.7, 5 after): the generated module must return what the code expects."""
    if "unpad_input" not in source:
        return set()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and len(node.targets) == 1 and isinstance(node.targets[0], (ast.Tuple, ast.List)):
            func = node.value.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name == "unpad_input":
                found.add(len(node.targets[0].elts))
    return found
