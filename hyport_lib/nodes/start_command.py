"""The command that starts one node of a multi-node job: ``hyport train`` with the node's flags
and every other parameter that is not at its default, so that the node plans the same job."""

from __future__ import annotations

import json
import shlex

from hyport_lib.params import StageParams, parameter_fields

#: Given for every node, whatever their values: they say which node and where the job meets.
NODE_FLAGS = ("nnodes", "node_rank", "master_addr", "master_port")


def start_command(params: StageParams, node_rank: int) -> str:
    """``hyport train --nnodes 2 --node-rank 1 --master-addr A --master-port P --max-steps 3 ...``
    (one line, quoted for a POSIX shell)."""
    fields = {f.name: f for f in parameter_fields(type(params))}
    values = {**params.to_dict(), "node_rank": node_rank}
    words = ["hyport", "train"]
    for name in NODE_FLAGS:
        words += [fields[name].flag, _text(values[name])]
    for name, f in fields.items():
        if name in NODE_FLAGS or values[name] == f.default:
            continue
        words += [f.flag, _text(values[name])]
    return shlex.join(words)


def _text(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)
