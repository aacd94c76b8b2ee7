"""What AST nodes mean for a port: the questions :mod:`.python_code` asks of them (a CUDA
device name? the seam's ``backend.kind == "cuda"`` idiom? an optional import?), and the
``is_cuda`` guards around attention code. Remote model code (InternViT-, Qwen-style) often
runs its flash path only for CUDA tensors: on an NPU an ``assert qkv.is_cuda`` *stops* the
port, an ``if q.is_cuda:`` *silently falls back* to eager. A guard counts when the code it
decides mentions (flash) attention."""

from __future__ import annotations

import ast
import re
from typing import Optional

from hyport_lib.scan import rules

_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
_GUARD_NAME_RE = re.compile(r"available|^TYPE_CHECKING$|^_?(has|HAS|use|USE)_")
#: ``backend.kind``, ``kind``, ``device.type``, ``accelerator_type()`` (what the scan's
#: suggestions and the port write): a comparison of these with "cuda" is a device test,
#: not a hard-coded device.
_KIND_ATTRS = {"kind", "type"}
_KIND_NAMES = {"kind"}
_KIND_CALLS = {"accelerator_type"}


def attr_position(node: ast.Attribute) -> tuple[int, int]:
    """Line and column of the ``.attr`` part (chains may span lines)."""
    if node.end_lineno is not None and node.end_col_offset is not None:
        return node.end_lineno, max(node.end_col_offset - len(node.attr), 0)
    return node.lineno, node.col_offset


def call_context(func: ast.expr) -> Optional[str]:
    """Which device-argument suggestion fits a call: ``.to``, ``torch.device``, autocast."""
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name in ("to", "device", "autocast", "GradScaler"):
        return name
    return None


def cuda_literal(node: ast.expr) -> Optional[ast.Constant]:
    """The string constant that makes ``node`` a CUDA device name, or None."""
    if isinstance(node, ast.Constant):
        is_device = isinstance(node.value, str) and rules.CUDA_DEVICE_RE.match(node.value)
        return node if is_device else None
    if isinstance(node, ast.JoinedStr) and node.values:
        return cuda_literal(node.values[0])
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return cuda_literal(node.left)
    is_format = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    if is_format and node.func.attr == "format":
        return cuda_literal(node.func.value)
    return None


def is_kind(node: ast.expr) -> bool:
    if isinstance(node, ast.Call) and not node.args:
        func = node.func
        return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) \
            in _KIND_CALLS
    if isinstance(node, ast.Attribute):
        return node.attr in _KIND_ATTRS
    return isinstance(node, ast.Name) and node.id in _KIND_NAMES


def names_npu(elts: list) -> bool:
    """True when an enumeration names the NPU backend too (so it lists backends)."""
    return any(isinstance(e, ast.Constant) and isinstance(e.value, str)
               and re.match(r"^npu(\b|_)", e.value) for e in elts)


def cuda_kind_branch(test: ast.expr) -> Optional[bool]:
    """True when ``test`` holds only on CUDA (``backend.kind == "cuda"``, also as a term
    of an ``and``), False when only off CUDA (``!= "cuda"``: the ``else`` is CUDA's)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return True if any(cuda_kind_branch(v) for v in test.values) else None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, right = test.left, test.comparators[0]
    is_cuda = (is_kind(left) and is_cuda_constant(right)) or (
        is_kind(right) and is_cuda_constant(left))
    if is_cuda and isinstance(test.ops[0], (ast.Eq, ast.Is)):
        return True
    if is_cuda and isinstance(test.ops[0], (ast.NotEq, ast.IsNot)):
        return False
    return None


def is_cuda_constant(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == "cuda"  # hyport-scan: ignore


def catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in _IMPORT_ERRORS for t in types)


def is_availability_test(test: ast.expr) -> bool:
    for node in ast.walk(test):
        name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
        if isinstance(name, str) and _GUARD_NAME_RE.search(name):
            return True
    return False


# --- is_cuda guards around attention code -------------------------------------------
_ATTENTION_WORDS = re.compile(r"flash|attn|attention|qkv", re.IGNORECASE)

STOPS = ("stops the flash path: on an NPU tensor this assert fails before the swapped attention "
         "is reached; drop it or test `tensor.device.type in ('cuda', 'npu')`; "
         + rules.port_writes("is_cuda_guard"))
FALLS_BACK = ("silently falls back: on an NPU the other branch (eager) runs and the swapped "
              "attention is never called; test `tensor.device.type in ('cuda', 'npu')` "
              "instead, and check that a forward makes swapped-attention calls "
              "(hyport attention's model check counts them); " + rules.port_writes("is_cuda_guard"))


def _words(node: ast.AST) -> set[str]:
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(sub.name)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            found.add(sub.value)
    return found


def _about_attention(*nodes: ast.AST, name: str = "") -> bool:
    words = set().union(*(_words(n) for n in nodes)) | {name}
    return any(_ATTENTION_WORDS.search(w) for w in words if w)


def _is_cuda_attributes(test: ast.AST) -> list[ast.Attribute]:
    return [n for n in ast.walk(test) if isinstance(n, ast.Attribute) and n.attr == "is_cuda"]


def _with_function(node: ast.AST, function=None, owner: str = ""):
    """Every node below ``node`` with its innermost enclosing function (None at module
    or class level) and the name of the innermost class around that."""
    for child in ast.iter_child_nodes(node):
        yield child, function, owner
        inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
        yield from _with_function(child, inner, child.name if isinstance(child, ast.ClassDef) else owner)


def is_cuda_guards(tree: ast.AST) -> dict[int, str]:
    """``id`` of each ``.is_cuda`` attribute that guards attention code -> what it does.

    An assert counts when its own function (the innermost one) is about attention, or,
    outside any function, when the assert itself is: a data-loading helper that asserts
    ``batch.is_cuda`` is no attention guard because the same file defines attention.
    """
    guards: dict[int, str] = {}
    for node, function, owner in _with_function(tree):
        name = f"{owner} {getattr(function, 'name', '')}".strip()
        if isinstance(node, ast.Assert):
            # a method of a class named for attention counts (FlashAttention2.forward)
            if _about_attention(function if function is not None else node, name=name):
                for attr in _is_cuda_attributes(node.test):
                    guards[id(attr)] = STOPS
        elif isinstance(node, (ast.If, ast.IfExp)):
            body = node.body if isinstance(node.body, list) else [node.body]
            orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
            if _about_attention(*body, *orelse, node.test, name=name):
                for attr in _is_cuda_attributes(node.test):
                    guards.setdefault(id(attr), FALLS_BACK)
    return guards
