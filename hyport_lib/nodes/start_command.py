"""The ``hyport train`` line each other node of a multi-node run starts with: node 0's plan
lists them, so that starting a node is a copy and a paste.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from typing import Optional

from hyport_lib.params import Field, parameter_fields
from hyport_lib.utils.redact import is_secret_parameter, scrub_text

#: Parameters the line leaves out: ``nodes_from``'s values are written out as the flags they
#: set (the other node need not have the same variables or hostfile).
LEFT_OUT = ("nodes_from",)


def start_command(params, node_rank: int) -> str:
    """``hyport train`` with every parameter of ``params`` that differs from its declared
    default, ``--node-rank node_rank`` always, shell-quoted; a relative path that exists here is
    made absolute (the other node starts elsewhere; it must see the same path); no parameter
    secret by its name, and the line scrubbed of secret values."""
    words = ["hyport", "train"]
    for f in parameter_fields(type(params)):
        value = node_rank if f.name == "node_rank" else getattr(params, f.name)
        if f.name in LEFT_OUT or is_secret_parameter(f.name):
            continue
        if f.name != "node_rank" and value == f.default and isinstance(value, bool) == isinstance(f.default, bool):
            continue
        words += [f.flag, _flag_text(f, value)]
    return scrub_text(" ".join(shlex.quote(w) for w in words))


def start_notes(params, output_dir: Optional[str] = None) -> list[str]:
    """Node 0's notes of a multi-node run: the line for each other node (``output_dir``: the
    folder the plan resolved, the same on every node)."""
    if params.nnodes < 2 or params.node_rank != 0:
        return []
    if output_dir is not None:
        params = dataclasses.replace(params, output_dir=output_dir)
    return [f"start node {rank} with: {start_command(params, rank)}" for rank in range(1, params.nnodes)]


def _flag_text(f: Field, value) -> str:
    """``value`` as the flag reads it back (:func:`hyport_lib.params.parse_text`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)  # JSON is YAML: the flag reads it back
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if f.spec.path and text.lower() not in f.spec.not_paths and not os.path.isabs(text) and os.path.exists(text):
        return os.path.abspath(text)
    return text
