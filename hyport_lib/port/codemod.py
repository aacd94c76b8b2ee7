# hyport-scan: ignore-file (this module names the CUDA constructs the port rewrites)
"""The Python rewrite of ``hyport port``: a LibCST transformer over one file.

LibCST keeps everything it does not touch byte for byte (comments, blank lines, quotes),
so the diff holds the ported lines only. What it rewrites, into what, and what it leaves
is the table of :mod:`hyport_lib.scan.rules`, matched by its matchers (the scan's walker
calls the same ones); each rewrite is a :class:`Change`, each construct left as it was
(nothing inside a ``torch.jit.script`` function is changed: the helpers are not
scriptable) a :class:`ManualSpot` with its reason. Entry: :func:`port_python`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import MetadataWrapper, PositionProvider

from hyport_lib.port.segments import SourcePlan, UnparsableSource, parse, plan
from hyport_lib.scan.rules import (GENERATED_MODULE, GUARD_PORT, METHOD_RULES, SERVED_FLASH_NAMES,
                                   UNPORTABLE_MODULES, Port, name_rule, port_of, string_rule)


@dataclass(frozen=True)
class Change:
    """One rewrite: where, what kind, the code before and after."""

    file: str
    line: int
    kind: str
    before: str
    after: str


@dataclass(frozen=True)
class ManualSpot:
    """Code left as it was for a human, and why."""

    file: str
    line: int
    kind: str
    snippet: str
    why: str


def _dotted(node) -> Optional[str]:
    """``a.b.c`` of a Name / Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def _string_value(node) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, SyntaxError):
            return None
        return value if isinstance(value, str) else None
    return None


_JIT_SCRIPT = ("torch.jit.script", "jit.script", "torch.jit.script_method")


def _decorator_name(decorator: cst.Decorator) -> str:
    target = decorator.decorator
    return _dotted(target.func if isinstance(target, cst.Call) else target) or ""


def _call_helper(name: str, *args: cst.Arg) -> cst.Call:
    return cst.Call(func=cst.Name(name), args=list(args))


def _string_port(node, keyword: Optional[str] = None, anywhere: bool = False) -> Optional[Port]:
    """The port's part of the rule a string literal matches, where it stands: an argument
    with ``keyword`` (None: positional), or ``anywhere`` (a comparison, an assignment)."""
    text = _string_value(node)
    rule = string_rule(text) if text is not None else None
    port = rule.port if rule else None
    if port is None or (port.keywords is not None and (anywhere or keyword not in port.keywords)):
        return None
    return port


class PortTransformer(cst.CSTTransformer):
    """Rewrites one module; read ``changes``, ``manual`` and ``helpers`` afterwards."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, rel: str, source_plan: SourcePlan, relative: bool, line_offset: int = 0):
        """``line_offset``: the lines of the file above the segment this transformer
        visits (its lines are counted from the segment's start)."""
        super().__init__()
        self.rel = rel
        self.guard_lines = source_plan.guard_positions
        self.relative = relative
        self.line_offset = line_offset
        self.changes: list[Change] = []
        self.manual: list[ManualSpot] = []
        self.helpers: set[str] = set()
        self._scripted_depth = 0
        self._module: Optional[cst.Module] = None
        self._targets: set[int] = set()  # id() of nodes assigned to or deleted
        self._attribute_values: set[int] = set()  # id() of nodes that are an attribute's object
        self._imported_names: set[int] = set()  # id() of the dotted names an import statement names
        # names bound to the torch module and to torch.cuda, in the whole file
        self._torch_names = set(source_plan.torch_names)
        self._cuda_names = set(source_plan.cuda_names)

    # --- bookkeeping ------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        self._module = node

    def _line(self, node) -> int:
        return self.get_metadata(PositionProvider, node).start.line + self.line_offset

    def _code(self, node) -> str:
        return self._module.code_for_node(node).strip() if self._module else ""

    def _change(self, original, updated, kind: str, helper: Optional[str] = None):
        if self._scripted_depth:
            self._leave_for_human(original, kind, "inside a torch.jit.script function: the port's "
                                  "helpers are not scriptable, and transfer_to_npu turns "
                                  "jit.script off; port this function by hand")
            return original
        self.changes.append(Change(self.rel, self._line(original), kind, self._code(original),
                                   self._code(updated)))
        if helper:
            self.helpers.add(helper)
        return updated

    def _leave_for_human(self, node, kind: str, why: str) -> None:
        self.manual.append(ManualSpot(self.rel, self._line(node), kind, self._code(node), why))

    # --- context the leave_* methods cannot see ---------------------------------------------
    def _add_targets(self, node) -> None:
        if isinstance(node, (cst.Tuple, cst.List)):
            for element in node.elements:
                self._add_targets(element.value)
        elif isinstance(node, cst.StarredElement):
            self._add_targets(node.value)
        else:
            self._targets.add(id(node))

    def _visit_target(self, node) -> None:
        self._add_targets(node.target)

    visit_AssignTarget = visit_AnnAssign = visit_AugAssign = visit_Del = _visit_target

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._attribute_values.add(id(node.value))

    def visit_Import(self, node: cst.Import) -> None:
        self._imported_names.update(id(alias.name) for alias in node.names)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = node.module  # torch.cuda.amp: the statement's note covers each of its parts
        while isinstance(module, cst.Attribute):
            self._imported_names.add(id(module))
            module = module.value

    def _torch_cuda(self, node) -> bool:
        """Whether ``node`` is ``torch.cuda`` (through the file's own names for them)."""
        if isinstance(node, cst.Name):
            return node.value in self._cuda_names
        return isinstance(node, cst.Attribute) and node.attr.value == "cuda" \
            and isinstance(node.value, cst.Name) and node.value.value in self._torch_names

    # --- torch.jit.script / triton ------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        for name in map(_decorator_name, node.decorators):
            if name in _JIT_SCRIPT:
                self._scripted_depth += 1
                self._leave_for_human(node, "jit_script",
                                      "torch.jit.script: transfer_to_npu disables it, and code "
                                      "changed inside would not script; review this function")
            elif name.startswith("triton."):
                self._leave_for_human(node, "triton_kernel", UNPORTABLE_MODULES["triton"])

    def leave_FunctionDef(self, original_node, updated_node):
        if any(_decorator_name(d) in _JIT_SCRIPT for d in original_node.decorators):
            self._scripted_depth -= 1
        return updated_node

    # --- imports -------------------------------------------------------------------------
    def leave_Import(self, original_node, updated_node):
        names = list(updated_node.names)
        for alias in names:
            module = _dotted(alias.name) or ""
            top = module.split(".")[0]
            bound = alias.asname.name.value if alias.asname else top
            if module == "torch" and alias.asname:
                self._torch_names.add(bound)
            elif module == "torch.cuda" and alias.asname:
                self._cuda_names.add(bound)
            if top in UNPORTABLE_MODULES:
                self._leave_for_human(original_node, top, UNPORTABLE_MODULES[top])
        flash = [a for a in names if (_dotted(a.name) or "").split(".")[0] == "flash_attn"]
        if not flash:
            return updated_node
        if len(names) == 1 and _dotted(names[0].name) == "flash_attn":
            asname = names[0].asname.name.value if names[0].asname else "flash_attn"
            alias = cst.ImportAlias(name=cst.Name(GENERATED_MODULE), asname=cst.AsName(name=cst.Name(asname)))
            new = cst.ImportFrom(module=None, relative=[cst.Dot()], names=[alias]) if self.relative \
                else cst.Import(names=[alias])
            return self._change(original_node, new, "flash_attn_import")
        self._leave_for_human(original_node, "flash_attn_unserved",
                              "imports a flash_attn submodule as a module (or with other "
                              "modules): rewrite its uses to flash_attn_ascend by hand")
        return updated_node

    def leave_ImportFrom(self, original_node, updated_node):
        if updated_node.relative:
            return updated_node
        module = _dotted(updated_node.module) or ""
        star = isinstance(updated_node.names, cst.ImportStar)
        imported = ["*"] if star else [_dotted(a.name) for a in updated_node.names]
        ports = [port_of(f"{module}.{name}", imported=True) for name in imported]
        left = next((port for port in ports if port and port.why), None)
        if left:  # a module with no Ascend build, names imported from torch.cuda
            self._leave_for_human(original_node, left.kind, left.why)
            return updated_node
        if module == "torch":
            self._cuda_names.update(alias.asname.name.value if alias.asname else "cuda"
                                    for alias in ([] if star else updated_node.names)
                                    if _dotted(alias.name) == "cuda")
            return updated_node
        if module.startswith("torch.utils.cpp_extension") or (module == "torch.utils"
                                                             and "cpp_extension" in imported):
            self._leave_for_human(original_node, "cuda_extension",
                                  "builds a C++/CUDA extension: it has no NPU build; port the "
                                  "kernel by hand")
            return updated_node
        if module.split(".")[0] != "flash_attn":
            return updated_node
        if not all(port and port.kind == "flash_attn_import" for port in ports):
            missing = ", ".join(n for n in imported if n not in SERVED_FLASH_NAMES) or module
            self._leave_for_human(original_node, "flash_attn_unserved",
                                  f"{module}: {missing} has no counterpart in "
                                  f"{GENERATED_MODULE}.py; the import is left as it was (behind "
                                  "try/except ImportError the code falls back at run time, "
                                  "else it fails on a host without flash-attn)")
            return updated_node
        new = updated_node.with_changes(
            module=cst.Name(GENERATED_MODULE),
            relative=[cst.Dot()] if self.relative else [])
        return self._change(original_node, new, "flash_attn_import")

    # --- calls, attributes, strings ---------------------------------------------------------
    def leave_Call(self, original_node, updated_node):
        func = updated_node.func
        dotted = _dotted(original_node.func) or ""
        if dotted in ("torch.jit.script", "jit.script"):
            self._leave_for_human(original_node, "jit_script",
                                  "torch.jit.script: transfer_to_npu disables it; check the "
                                  "scripted code runs unscripted on the NPU")
            return updated_node
        owner = _dotted(func.value) if isinstance(func, cst.Attribute) else None
        if isinstance(func, cst.Attribute) and func.attr.value in METHOD_RULES \
                and not (owner and owner.split(".")[0] in self._torch_names):
            port = METHOD_RULES[func.attr.value].port
            device_args = [a for a in updated_node.args
                           if a.keyword is None or a.keyword.value == "device"]
            other = [a for a in updated_node.args if a not in device_args]
            helper_args = [a.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)
                           for a in device_args]
            # the call's own parentheses and the dot's whitespace stay: `(x\n .cuda())` and
            # `1 .cuda()` are Python only with them
            new = updated_node.with_changes(
                func=func.with_changes(attr=cst.Name("to")),
                args=[cst.Arg(_call_helper(port.helper, *helper_args)), *other])
            return self._change(original_node, new, port.kind, port.helper)
        return updated_node

    def leave_Attribute(self, original_node, updated_node):
        if id(original_node) in self._imported_names:  # an import statement's name: noted there
            return updated_node
        attr = original_node.attr.value
        if self._torch_cuda(original_node.value):
            port = port_of(f"torch.cuda.{attr}")
            if port.helper:
                new = cst.Attribute(value=_call_helper(port.helper), attr=updated_node.attr)
                return self._change(original_node, new, port.kind, port.helper)
            self._leave_for_human(original_node, port.kind, port.why)
            return updated_node
        if self._torch_cuda(original_node) and id(original_node) not in self._attribute_values:
            self._leave_for_human(original_node, "torch_cuda",
                                  "torch.cuda used as a module: use accelerator_module() by hand")
            return updated_node
        if _dotted(original_node.value) in {f"{t}.backends" for t in self._torch_names} \
                and attr == "cuda":
            self._leave_for_human(original_node, "torch_cuda",
                                  "torch.backends.cuda settings (matmul / SDPA kernels) have no "
                                  "NPU meaning: decide by hand")
            return updated_node
        rule = name_rule(attr, attribute=True)
        if rule and rule.port and id(original_node) not in self._targets:
            line_col = self.get_metadata(PositionProvider, original_node).start
            guard = (line_col.line + self.line_offset, line_col.column) in self.guard_lines
            port = GUARD_PORT if guard else rule.port
            new = _call_helper(port.helper, cst.Arg(updated_node.value))
            return self._change(original_node, new, port.kind, port.helper)
        return updated_node

    def leave_Arg(self, original_node, updated_node):
        keyword = original_node.keyword.value if original_node.keyword else None
        port = _string_port(updated_node.value, keyword)
        if port:
            new = updated_node.with_changes(value=self._written(port))
            return self._change(original_node, new, port.kind, port.helper)
        if isinstance(updated_node.value, cst.FormattedString) and keyword in (None, "device"):
            parts = updated_node.value.parts
            if len(parts) == 2 and isinstance(parts[0], cst.FormattedStringText) \
                    and parts[0].value == "cuda:" \
                    and isinstance(parts[1], cst.FormattedStringExpression) \
                    and parts[1].format_spec is None and parts[1].conversion is None:
                new = updated_node.with_changes(value=_call_helper(
                    "accelerator_device", cst.Arg(parts[1].expression)))
                return self._change(original_node, new, "cuda_device", "accelerator_device")
        return updated_node

    def leave_Comparison(self, original_node, updated_node):
        # `backend == "nccl"`: the backend of the device, on either side
        left = updated_node.left
        if _string_port(left, anywhere=True):
            left = self._rewrite_value(original_node.left)
        targets = []
        for before, target in zip(original_node.comparisons, updated_node.comparisons):
            if _string_port(target.comparator, anywhere=True):
                target = target.with_changes(comparator=self._rewrite_value(before.comparator))
            targets.append(target)
        return updated_node.with_changes(left=left, comparisons=targets)

    def leave_Assign(self, original_node, updated_node):
        if _string_port(updated_node.value, anywhere=True):
            return updated_node.with_changes(value=self._rewrite_value(original_node.value))
        return updated_node

    @staticmethod
    def _written(port: Port) -> cst.Call:
        return _call_helper(port.helper, *(cst.Arg(cst.Integer(arg)) for arg in port.args))

    def _rewrite_value(self, original):
        port = _string_port(original, anywhere=True)
        return self._change(original, self._written(port), port.kind, port.helper)


@dataclass
class FileResult:
    """One file's port: the new text (None when unchanged) and what happened."""

    code: Optional[str]
    changes: list[Change]
    manual: list[ManualSpot]


def _rewrite_segment(text: str, rel: str, source_plan: SourcePlan, relative: bool,
                     first_line: int) -> tuple[str, PortTransformer]:
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise UnparsableSource(f"line {exc.raw_line + first_line - 1}: "
                               f"{str(exc).splitlines()[0]}") from None
    transformer = PortTransformer(rel, source_plan, relative, line_offset=first_line - 1)
    # the module is ours alone: no defensive deep copy before the visit
    new = MetadataWrapper(module, unsafe_skip_copy=True).visit(transformer)
    return (new.code if transformer.changes else text), transformer


def _add_helper_imports(header: str, helpers: set[str], relative: bool) -> str:
    """``header`` (the file's first segments) with the helpers imported from the
    generated module, as LibCST's AddImportsVisitor places them."""
    context = CodemodContext()
    for helper in sorted(helpers):
        AddImportsVisitor.add_needed_import(context, GENERATED_MODULE, helper,
                                            relative=1 if relative else 0)
    return AddImportsVisitor(context).transform_module(cst.parse_module(header)).code


def port_python(source: str, rel: str, *, relative: bool) -> FileResult:
    """Port one Python file's text, segment by segment (:mod:`hyport_lib.port.segments`);
    ``relative``: import the generated module relatively (the file lives in a package or is
    remote code whose siblings it imports with ``from .x import``). ``code`` is None when
    nothing changed; UnparsableSource (naming the line) when the file does not parse."""
    source_plan = plan(source)
    texts, changes, manual, helpers = [], [], set(), set()
    for segment in source_plan.segments:
        if not segment.needs_rewrite:
            texts.append(segment.text)
            continue
        code, done = _rewrite_segment(segment.text, rel, source_plan, relative,
                                      segment.first_line)
        texts.append(code)
        changes += done.changes
        manual |= set(done.manual)
        helpers |= done.helpers
    try:
        if helpers:
            count = source_plan.header_count
            texts[:count] = [_add_helper_imports("".join(texts[:count]), helpers, relative)]
        code = "".join(texts)
        if code != source:
            parse(code)  # never write a port that is not Python
    except (cst.ParserSyntaxError, UnparsableSource) as exc:
        raise UnparsableSource(f"the rewrite would not be Python ({str(exc).splitlines()[0]}): "
                               "please report it") from None
    return FileResult(code if code != source else None,
                      sorted(changes, key=lambda c: (c.line, c.kind)),
                      sorted(manual, key=lambda m: (m.line, m.kind, m.snippet, m.why)))
