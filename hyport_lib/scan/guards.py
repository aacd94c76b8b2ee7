"""``is_cuda`` guards around attention code: what they do to a port.

Remote model code (InternViT-, Qwen-style) often runs its flash path only for CUDA tensors:
on an NPU an ``assert qkv.is_cuda`` *stops* the port, an ``if q.is_cuda:`` *silently falls
back* to eager. A guard counts when the code it decides mentions (flash) attention.
"""

from __future__ import annotations

import ast
import re

from hyport_lib.scan.rules import port_writes

_ATTENTION_WORDS = re.compile(r"flash|attn|attention|qkv", re.IGNORECASE)

STOPS = ("stops the flash path: on an NPU tensor this assert fails before the swapped attention "
         "is reached; drop it or test `tensor.device.type in ('cuda', 'npu')`; "
         + port_writes("is_cuda_guard"))
FALLS_BACK = ("silently falls back: on an NPU the other branch (eager) runs and the swapped "
              "attention is never called; test `tensor.device.type in ('cuda', 'npu')` (or "
              "backend.kind) instead, and check that a forward makes swapped-attention calls "
              "(hyport attention's model check counts them); " + port_writes("is_cuda_guard"))


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
