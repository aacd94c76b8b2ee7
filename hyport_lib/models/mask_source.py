"""Does a model's own transformers code let some tokens attend both ways (Gemma3 and
Gemma-4 within each image, PaliGemma over its prefix, Molmo2 ...)? Packed rows attend
causally per sample, so such a model would be trained as another one.
:func:`bidirectional_mask` reads the modeling source, never imports it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


#: The hooks through which transformers' modeling code lets tokens attend both ways on
#: top of the causal mask: ``block_sequence_ids`` (5.x: the tokens of a block see each
#: other) and ``or_mask_function`` (4.x and 5.x: any extra pair; 4.x Gemma3 passes its
#: ``token_type_ids_mask_function`` through it), as a keyword or a ``mask_kwargs`` entry.
#: transformers 4.x PaliGemma unmasks its prefix by hand: ``masked_fill`` on
#: ``token_type_ids`` (the third hook).
_MASK_HOOKS = {
    "block_sequence_ids": "block_sequence_ids",
    "or_mask_function": "an or_mask_function",
    "token_type_ids": "an unmasked token_type_ids prefix",
}
#: Parts of a model that never see the packed sequence: a vision or audio tower encodes
#: each image or clip apart, whatever its mask inside (DeepSeek-OCR-2's vision encoder
#: attends both ways over its patches), so their code is not scanned.
_TOWER_WORDS = ("Vision", "Visual", "Audio", "Speech")
#: The hooks passed by name (a keyword, a ``mask_kwargs`` key).
_NAMED_HOOKS = ("block_sequence_ids", "or_mask_function")
#: A value the scan cannot know from the config (an input such as ``token_type_ids``).
_UNKNOWN = object()
_COMPARISONS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not}


@dataclass(frozen=True)
class _MaskHook:
    """One use of a mask hook: where, and the ``if`` tests (with the branch) around it."""

    owner: str
    hook: str
    conditions: tuple
    assignments: tuple  # the function's single assignments: the tests may read them


def bidirectional_mask(data: dict) -> Optional[str]:
    """Where the model of config ``data`` widens its causal mask (``"Gemma3Model.forward
    widens the causal mask with block_sequence_ids"``), or None when its code never does
    for this config. A mask hook in a method of the model class (and its text model's), or
    of a class it names, counts unless an ``if`` around it is decided False by the config
    (Gemma-4 widens its mask only with ``use_bidirectional_attention="vision"``); a test on
    an input (``token_type_ids is not None``) counts as taken: the processor provides those.
    Unknown remote code is not read.
    """
    from transformers.models.auto.configuration_auto import model_type_to_module_name
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        MODEL_MAPPING_NAMES,
    )

    config = _config_object(data)
    parts = [(str(data.get("model_type") or ""), config,
              (MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))]
    text = data.get("text_config")
    if isinstance(text, dict) and text.get("model_type") and text.get("model_type") != parts[0][0]:
        parts.append((str(text["model_type"]), config.get_text_config(), (MODEL_MAPPING_NAMES,)))
    for model_type, part_config, mappings in parts:
        names = [name for mapping in mappings for name in _as_tuple(mapping.get(model_type))]
        if not model_type or not names:
            continue
        taken = [hook for class_name in names
                 for hook in _mask_hooks(_defining_module(model_type_to_module_name(model_type), class_name),
                                         class_name)
                 if _taken(hook, part_config)]
        if taken:
            # Named after a forward where one has it: the path training takes.
            hook = next((h for h in taken if h.owner.endswith(".forward")), taken[0])
            return f"{hook.owner} widens the causal mask with {_MASK_HOOKS[hook.hook]}"
    return None


def _as_tuple(value) -> tuple:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


class _ConfigView:
    """A config dict read like a config object, for a config its class does not take."""

    def __init__(self, data: dict):
        self._data = data

    def __getattr__(self, name):
        if name.startswith("_") or name not in self._data:
            raise AttributeError(name)
        value = self._data[name]
        return _ConfigView(value) if isinstance(value, dict) else value

    def get_text_config(self, *args, **kwargs):
        text = self._data.get("text_config")
        return _ConfigView(text) if isinstance(text, dict) else self


def _config_object(data: dict):
    """The config object of ``data`` (its class fills the defaults a saved config leaves
    out, e.g. Gemma-4's ``use_bidirectional_attention``), else a view of the dict."""
    from transformers import CONFIG_MAPPING
    from transformers.utils import logging as hf_logging

    model_type = str(data.get("model_type") or "")
    if model_type not in CONFIG_MAPPING:
        return _ConfigView(data)
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the scan is no place for the config's own warnings
    try:
        return CONFIG_MAPPING[model_type].from_dict(dict(data))
    except Exception:  # noqa: BLE001 — validators raise their own types (huggingface_hub's)
        # A config its class refuses still has its values: the view reads them, and a
        # switch it lacks stays unknown (its hook then counts).
        return _ConfigView(data)
    finally:
        hf_logging.set_verbosity(level)


@functools.lru_cache(maxsize=None)
def _module_classes(module: str) -> dict:
    """Class name -> class definition (AST) over ``transformers.models.<module>``'s modeling files."""
    spec = importlib.util.find_spec(f"transformers.models.{module}")
    if spec is None or not spec.submodule_search_locations:
        return {}
    classes: dict[str, ast.ClassDef] = {}
    for folder in spec.submodule_search_locations:
        for path in sorted(Path(folder).glob("modeling_*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
                if isinstance(node, ast.ClassDef):
                    classes.setdefault(node.name, node)
    return classes


@functools.lru_cache(maxsize=None)
def _defining_module(module: str, class_name: str) -> str:
    """The ``transformers.models`` package whose modeling code defines ``class_name``: for a
    model type that maps to another family's class (ShieldGemma2 ->
    Gemma3ForConditionalGeneration) not ``module`` itself."""
    if class_name in _module_classes(module):
        return module
    spec = importlib.util.find_spec("transformers.models")
    needle = f"\nclass {class_name}("
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(Path(folder).glob("*/modeling_*.py")):
            if needle in path.read_text(encoding="utf-8"):
                return path.parent.name
    return module


@functools.lru_cache(maxsize=None)
def _mask_hooks(module: str, class_name: str) -> tuple:
    """Every mask hook in the methods of ``class_name`` and of the classes of its module it
    names (its bases, its sub-models), towers left out."""
    classes = _module_classes(module)
    seen: list[str] = []
    todo = [class_name]
    while todo:
        name = todo.pop()
        if name in seen or name not in classes:
            continue
        if name != class_name and any(word in name for word in _TOWER_WORDS):
            continue
        seen.append(name)
        todo += [node.id for node in ast.walk(classes[name])
                 if isinstance(node, ast.Name) and node.id in classes]
    hooks = []
    for name in seen:
        for item in classes[name].body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assignments = _single_assignments(item)
                hooks += [_MaskHook(f"{name}.{item.name}", hook, conditions, assignments)
                          for hook, conditions in _hooks_in(item.body, ())]
    return tuple(hooks)


def _hooks_in(statements, conditions: tuple) -> list:
    found = []
    for statement in statements:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # a nested definition is not run where it is written
        if isinstance(statement, ast.If):
            found += _hooks_in(statement.body, conditions + ((statement.test, True),))
            found += _hooks_in(statement.orelse, conditions + ((statement.test, False),))
        elif hasattr(statement, "body"):  # for, while, with, try: their blocks, same tests
            for block in ("body", "orelse", "finalbody"):
                found += _hooks_in(getattr(statement, block, []), conditions)
            for handler in getattr(statement, "handlers", []):
                found += _hooks_in(handler.body, conditions)
        else:
            found += [(hook, conditions) for hook in _hooks_of(statement)]
    return found


def _hooks_of(statement) -> list[str]:
    hooks = []
    for node in ast.walk(statement):
        if isinstance(node, ast.keyword) and node.arg in _NAMED_HOOKS:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                hooks.append(node.arg)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            key = node.slice
            if isinstance(key, ast.Constant) and key.value in _NAMED_HOOKS:
                hooks.append(key.value)
        elif isinstance(node, ast.Dict):
            hooks += [key.value for key in node.keys
                      if isinstance(key, ast.Constant) and key.value in _NAMED_HOOKS]
        elif _unmasks_by_token_type(node):
            hooks.append("token_type_ids")
    return hooks


def _unmasks_by_token_type(node) -> bool:
    """``<...mask...>.masked_fill(<token_type_ids ...>, ...)``: 4.x PaliGemma opening its
    prefix in the causal mask (not the labels a loss masks the same way)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "masked_fill" and node.args):
        return False
    receiver = node.func.value
    while isinstance(receiver, (ast.Subscript, ast.Attribute)):
        receiver = receiver.value
    return (isinstance(receiver, ast.Name) and "mask" in receiver.id
            and any(isinstance(n, ast.Name) and n.id == "token_type_ids" for n in ast.walk(node.args[0])))


def _single_assignments(function) -> tuple:
    """(name, expression) of each local name assigned exactly once (a name assigned twice
    has no known value at the test)."""
    counts: dict[str, int] = {}
    values: dict[str, ast.expr] = {}
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        counts[name.id] = counts.get(name.id, 0) + 1
                        values[name.id] = node.value
    return tuple((name, values[name]) for name, count in counts.items()
                 if count == 1 and values[name] is not None)


def _taken(hook: _MaskHook, config) -> bool:
    """An undecided test counts as taken."""
    local = dict(hook.assignments)
    for test, branch in hook.conditions:
        value = _evaluate(test, config, local)
        if value is not _UNKNOWN and bool(value) != branch:
            return False
    return True


def _is_config(value) -> bool:
    return isinstance(value, _ConfigView) or callable(getattr(value, "get_text_config", None))


def _evaluate(node, config, local: dict):
    """The value of a test expression that reads only the config and constants, else
    :data:`_UNKNOWN`. An attribute the config lacks is looked up in its text config (a text
    model's code reads the text config as ``self.config``)."""
    def value(sub):
        return _evaluate(sub, config, local)

    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in local:
            return _evaluate(local[node.id], config, {k: v for k, v in local.items() if k != node.id})
        return {"config": config, "text_config": config.get_text_config()}.get(node.id, _UNKNOWN)
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            return config if node.attr == "config" else _UNKNOWN
        return _config_attribute(value(node.value), node.attr)
    if isinstance(node, ast.Call):
        return _evaluate_call(node, value)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [value(item) for item in node.elts]
        return _UNKNOWN if any(item is _UNKNOWN for item in items) else tuple(items)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = value(node.operand)
        return _UNKNOWN if inner is _UNKNOWN else not inner
    if isinstance(node, ast.BoolOp):
        truths = [value(item) for item in node.values]
        decided = [bool(t) for t in truths if t is not _UNKNOWN]
        stop = isinstance(node.op, ast.Or)  # the value that decides: True for or, False for and
        if stop in decided:
            return stop
        return _UNKNOWN if len(decided) < len(truths) else not stop
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return _compare(node.ops[0], value(node.left), value(node.comparators[0]))
    return _UNKNOWN


def _evaluate_call(node: ast.Call, value):
    function = node.func
    if isinstance(function, ast.Attribute) and function.attr == "get_text_config":
        owner = value(function.value)
        return owner.get_text_config() if _is_config(owner) else _UNKNOWN
    if isinstance(function, ast.Name) and function.id == "getattr" and len(node.args) in (2, 3):
        owner, name = value(node.args[0]), value(node.args[1])
        if not isinstance(name, str):
            return _UNKNOWN
        found = _config_attribute(owner, name)
        if found is _UNKNOWN and len(node.args) == 3 and _is_config(owner):
            return value(node.args[2])
        return found
    return _UNKNOWN


def _config_attribute(owner, name: str):
    if not _is_config(owner):
        return _UNKNOWN
    for source in (owner, owner.get_text_config()):
        try:
            return getattr(source, name)
        except AttributeError:
            continue
    return _UNKNOWN


def _compare(op, left, right):
    if left is _UNKNOWN or right is _UNKNOWN:
        return _UNKNOWN
    if type(op) in _COMPARISONS:
        return _COMPARISONS[type(op)](left, right)
    if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, tuple):
        return (left in right) is isinstance(op, ast.In)
    return _UNKNOWN
