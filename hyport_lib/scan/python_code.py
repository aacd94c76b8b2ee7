"""Python files: CUDA-isms found through the AST, or by a line scan when the file does not
parse.

Findings (tables in :mod:`.rules`): imports of CUDA-only modules (``guarded`` behind
``try/except ImportError`` or ``if is_..._available():``) and names resolving into them;
``x.cuda()``, ``x.is_cuda`` and similar names; strings whose *whole value* is a device,
backend, implementation, package or variable name, or an install command. Prose is never a
finding: comments are not in the AST, and a docstring never equals such a value.

Code that already follows the advice is left alone: ``"cuda"`` compared with
``accelerator_type()`` / ``backend.kind`` / ``device.type``, listed with ``"npu"``, or used
inside ``if accelerator_type() == "cuda":``.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from hyport_lib.scan import dependencies, rules
from hyport_lib.scan.ast_tests import (
    attr_position, call_context, catches_import_error, cuda_kind_branch, cuda_literal,
    is_availability_test, is_cuda_guards, is_kind, names_npu,
)
from hyport_lib.scan.hits import Hit, decode_source, hit_at, split_lines

_ATTR_BUILTINS = {"getattr", "hasattr", "setattr", "delattr"}
#: Categories that a ``backend.kind == "cuda"`` guard makes deliberate.
_KIND_GUARDED = {rules.CUDA_CALL, rules.CUDA_DEVICE}


def scan_python(data: bytes, rel: str, *,
                package_strings: bool = True) -> tuple[list[Hit], Optional[str]]:
    """``(hits, error)`` of one Python file (``rel``: its path in the hits); ``error`` is None
    when it parsed, else the hits hold one ``unparsable`` hit and what a line scan found.
    ``package_strings``: off for ``setup.py``, whose requirement strings the dependency
    scan reports."""
    text, error = decode_source(data)
    lines = split_lines(text)
    tree, line, col = None, 1, 0
    if error is None:
        try:
            tree = ast.parse(text, filename=rel)
        except (SyntaxError, ValueError, RecursionError) as exc:
            error = _describe_parse_error(exc)
            line = getattr(exc, "lineno", None) or 1
            col = max((getattr(exc, "offset", None) or 1) - 1, 0)
    if tree is not None:
        scanner = _Scanner(rel, lines, package_strings=package_strings)
        try:
            scanner.prepare(tree)
            scanner.visit(tree)
            return scanner.hits(), None
        except RecursionError:  # parsed, but nested deeper than the visitor can recurse
            error = "RecursionError: expression nested too deeply for the AST scan"
    hits = [hit_at(rel, lines, line, col, rules.UNPARSABLE,
                   f"{error}; scanned line by line instead: fix the file or port it by hand")]
    for number, code in enumerate(lines, start=1):
        if not code.lstrip().startswith("#"):  # `!pip install ...` of a notebook export
            hits += dependencies.install_hits(rel, lines, number, note=FALLBACK_NOTE)
    return hits + line_scan(rel, lines), error


def _describe_parse_error(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return f"{type(exc).__name__}: {exc.msg}{where}"
    return f"{type(exc).__name__}: {exc}"


# --- line scan, for files the parser rejects -------------------------------------------
FALLBACK_NOTE = " (line scan: the file does not parse)"
_FALLBACK_RULES = (
    (re.compile(r"^\s*(?:from|import)\s+((?:flash_attn\w*|apex|amp_C|xformers|triton|bitsandbytes)"
                r"(?:\.\w+)*)"),
     lambda m: (rules.module_category(m.group(1)), rules.suggestion_for(m.group(1)))),
    (re.compile(r"\.cuda\("), lambda m: (rules.CUDA_CALL, rules.CUDA_METHOD_SUGGESTION)),
    (re.compile(r"\btorch\.(?:backends\.)?cuda(?:\.\w+)*"),
     lambda m: (rules.CUDA_CALL, rules.suggestion_for(m.group(0)))),
    # "cuda", 'cuda:0', f"cuda:{rank}", "cuda:%d" % i, "cuda:" + str(i)
    (re.compile(r"""(?<!\w)[fF]?["']cuda(?::(?:\d*|\{[^}"']*\}|%[ds]))?["']"""),
     lambda m: (rules.CUDA_DEVICE, rules.DEVICE_SUGGESTION)),
    (re.compile(r"\.is_cuda\b"),
     lambda m: (rules.CUDA_DEVICE, rules.name_rule("is_cuda", attribute=True).suggestion)),
    (re.compile(r"""["']nccl["']"""), lambda m: (rules.NCCL, rules.NCCL_SUGGESTION)),
    (re.compile(r"""["']flash_attention_[23]["']"""),
     lambda m: (rules.FLASH_ATTN, rules.FLASH_IMPL_SUGGESTION)),
    (re.compile(rf"\b({rules.ENV_VAR_NAMES})\b"), lambda m: rules.env_var_rule(m.group(1))),
)


def line_scan(rel: str, lines: list[str]) -> list[Hit]:
    """Regex rules over code lines (comment lines skipped); one hit per rule and line."""
    hits = []
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("#"):
            continue
        for pattern, describe in _FALLBACK_RULES:
            match = pattern.search(line)
            if match:
                category, suggestion = describe(match)
                hits.append(hit_at(rel, lines, number, match.start(), category,
                                   suggestion + FALLBACK_NOTE))
    return sorted(set(hits))


class _Scanner(ast.NodeVisitor):
    """One pass over a module's AST; ``prepare`` first learns its imports."""

    def __init__(self, rel: str, lines: list[str], *, package_strings: bool):
        self.rel = rel
        self.lines = lines
        self.package_strings = package_strings
        self.aliases: dict[str, str] = {}  # local name -> qualified name
        self.guarded: set[int] = set()  # id() of guarded import statements
        self.handled: set[int] = set()  # id() of string constants already reported
        self.docstrings: set[int] = set()  # id() of docstring constants (prose)
        self.kind_guarded: set[int] = set()  # lines inside `if backend.kind == "cuda":`
        self.cuda_guards: dict[int, str] = {}  # id() of `.is_cuda` guarding attention code
        self._hits: dict[tuple, Hit] = {}

    # --- bookkeeping --------------------------------------------------------------
    def hits(self) -> list[Hit]:
        return sorted(self._hits.values())

    def add(self, line: int, col: int, category: str, suggestion: str) -> None:
        if category in _KIND_GUARDED and line in self.kind_guarded:
            return  # behind `accelerator_type() == "cuda"`: exactly what the suggestions ask for
        hit = hit_at(self.rel, self.lines, line, col, category, suggestion)
        self._hits.setdefault((line, col, category), hit)

    def prepare(self, tree: ast.AST) -> None:
        """Record every import binding (scopes are flattened: names rarely clash) and guards."""
        self.cuda_guards = is_cuda_guards(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".", 1)[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Try) and any(catches_import_error(h) for h in node.handlers):
                self._mark_guarded(node.body)
            elif isinstance(node, ast.If) and is_availability_test(node.test):
                self._mark_guarded(node.body)
            if isinstance(node, ast.If):
                branch = cuda_kind_branch(node.test)
                guarded = node.body if branch else node.orelse if branch is False else []
                if branch and isinstance(node.test, ast.BoolOp):
                    guarded = [node.test, *guarded]  # `kind == "cuda" and torch.cuda.x()`
                for part in guarded:
                    last = part.end_lineno or part.lineno
                    self.kind_guarded.update(range(part.lineno, last + 1))
            is_scope = isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                         ast.AsyncFunctionDef))
            if is_scope and node.body and isinstance(node.body[0], ast.Expr):
                self.docstrings.add(id(node.body[0].value))

    def _mark_guarded(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            for node in ast.walk(stmt):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    self.guarded.add(id(node))

    def qualify(self, node: ast.AST) -> Optional[str]:
        """Dotted name an expression resolves to through the imports, or None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.aliases.get(node.id, "torch" if node.id == "torch" else None)
        if base is None:
            return None
        return ".".join([base, *reversed(parts)])

    # --- imports --------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        self._report_import(node, [a.name for a in node.names])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return  # relative imports name the project's own modules
        self._report_import(
            node, [node.module if a.name == "*" else f"{node.module}.{a.name}" for a in node.names])

    def _report_import(self, node: ast.stmt, qualified: list[str]) -> None:
        found: dict[str, list[str]] = {}
        for name in qualified:
            category = rules.category_for(name)
            if category:
                text = rules.suggestion_for(name, imported=isinstance(node, ast.ImportFrom))
                found.setdefault(category, [])
                if text not in found[category]:
                    found[category].append(text)
        for category, texts in found.items():
            suggestion = " | ".join(texts)
            if id(node) in self.guarded:
                suggestion = rules.GUARDED_PREFIX + suggestion
            self.add(node.lineno, node.col_offset, category, suggestion)

    # --- names and attributes -----------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        qualified = self.aliases.get(node.id)
        if qualified and self._report_qualified(node, qualified):
            return
        self._report_rule(node.lineno, node.col_offset, rules.name_rule(node.id))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        qualified = self.qualify(node)
        if qualified and self._report_qualified(node, qualified):
            return  # the inner part of the chain is the same finding
        if isinstance(node.ctx, ast.Load):
            line, col = attr_position(node)
            if id(node) in self.cuda_guards:
                self.add(line, col, rules.IS_CUDA_GUARD, self.cuda_guards[id(node)])
                return self.generic_visit(node)
            self._report_rule(line, col, rules.name_rule(node.attr, attribute=True))
        self.generic_visit(node)

    def _report_qualified(self, node: ast.expr, qualified: str) -> bool:
        category = rules.category_for(qualified)
        if category is None:
            return False
        # Kernels are written in triton.language; their import already says it all.
        kernel_body = qualified.startswith("triton.language")  # hyport-scan: ignore
        if category != rules.TRITON or not kernel_body:
            root = node
            while isinstance(root, ast.Attribute):
                root = root.value
            # a name bound by `from torch.cuda import x`: the port leaves it and its uses
            imported = isinstance(root, ast.Name) and \
                self.aliases.get(root.id, "").startswith("torch.cuda.")
            self.add(node.lineno, node.col_offset, category,
                     rules.suggestion_for(qualified, imported))
        return True

    def _report_rule(self, line: int, col: int, rule: Optional[rules.Rule]) -> None:
        if rule is not None:
            self.add(line, col, rule.category, rule.suggestion)

    # --- calls, comparisons, strings ------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        is_method = isinstance(func, ast.Attribute) and func.attr in rules.METHOD_RULES
        if is_method and self.qualify(func) != f"torch.{func.attr}":
            self._report_rule(*attr_position(func), rules.METHOD_RULES[func.attr])
        if isinstance(func, ast.Name) and func.id in _ATTR_BUILTINS and len(node.args) >= 2:
            self._dynamic_attribute(node)
        context = call_context(func)
        for arg in node.args:
            self._device_argument(arg, context)
        for keyword in node.keywords:
            device_keyword = keyword.arg in ("device", "device_map", "device_type")
            self._device_argument(keyword.value, keyword.arg if device_keyword else context)
        self.generic_visit(node)

    def _dynamic_attribute(self, node: ast.Call) -> None:
        """``getattr(torch, "cuda")`` is ``torch.cuda``; ``getattr(x, "cuda")`` names no device."""
        name = node.args[1]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return
        self.handled.add(id(name))
        base = self.qualify(node.args[0])
        if base and rules.category_for(base) is None:
            qualified = f"{base}.{name.value}"
            category = rules.category_for(qualified)
            if category:
                self.add(node.lineno, node.col_offset, category, rules.suggestion_for(qualified))

    def _device_argument(self, value: ast.expr, context: Optional[str]) -> None:
        literal = cuda_literal(value)
        if literal is not None and context is not None:
            self.handled.add(id(literal))
            self.add(literal.lineno, literal.col_offset, rules.CUDA_DEVICE,
                     rules.DEVICE_CONTEXT_SUGGESTIONS[context])

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        seam_idiom = any(is_kind(o) for o in operands)  # backend.kind == "cuda"
        operands += [e for o in operands if isinstance(o, (ast.Tuple, ast.List, ast.Set))
                     and not names_npu(o.elts) for e in o.elts]
        for operand in operands:
            literal = cuda_literal(operand)
            if literal is not None:
                self.handled.add(id(literal))
                if not seam_idiom:
                    self.add(literal.lineno, literal.col_offset, rules.CUDA_DEVICE,
                             rules.DEVICE_CONTEXT_SUGGESTIONS["compare"])
        self.generic_visit(node)

    # --- enumerations of backends: ("auto", "npu", "cuda", "cpu") names no device --------
    def _enumeration(self, elts: list) -> None:
        if names_npu(elts):
            self.handled.update(id(e) for e in elts if e is not None)

    def visit_Tuple(self, node: ast.Tuple) -> None:
        self._enumeration(node.elts)
        self.generic_visit(node)

    visit_List = visit_Set = visit_Tuple

    def visit_Dict(self, node: ast.Dict) -> None:
        self._enumeration(node.keys)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._enumeration([node.body, node.orelse])  # "npu" if ascend else "cuda"
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str) or id(node) in self.handled:
            return
        value = node.value
        where = (node.lineno, node.col_offset)
        rule = rules.string_rule(value)
        if rule is not None:
            self._report_rule(*where, rule)
        elif self.package_strings and rules.PACKAGE_NAME_RE.match(value):
            self.add(*where, rules.module_category(value),
                     "names the package (dynamic import or availability probe): "
                     + rules.suggestion_for(value.replace("-", "_")))
        else:
            for match in rules.ENV_VAR_RE.finditer(value):
                self.add(*where, *rules.env_var_rule(match.group(1)))
            if "install" in value and id(node) not in self.docstrings:
                # one hit per string, so each suggestion names its package
                found = dependencies.install_suggestions(value, commands_only=True)
                if found:
                    self.add(*where, rules.REQUIREMENT,
                             " | ".join(f"{token}: {text}" for token, text in found))
