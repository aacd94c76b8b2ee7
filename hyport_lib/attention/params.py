"""Stage 02's parameters: notebook ``02_attention``'s ``parameters`` cell, ``hyport
attention``'s flags and the report's keys, declared once (see :mod:`hyport_lib.params`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hyport_lib.params import (ParameterError, StageParams, card_memory_param, device_param, model_path_param,
                               param, trust_remote_code_param)
from hyport_lib.utils.imports import version_tuple

#: The dtypes the grid runs its cases in.
DTYPES = ("float16", "bfloat16", "float32")


@dataclass
class Params(StageParams):
    device: str = device_param("where eager and sdpa run: auto | npu | cuda | cpu")
    dtypes: list = param(list(DTYPES), "dtypes of the grid, each once: float16, bfloat16, float32")
    full: bool = param(False, "the bigger grid (every layout, mask, length and head count crossed)")
    code_path: str = param("", "folder or file to scan for CUDA / flash-attn code; empty: a small planted example",
                           path="any", must_exist=True)
    model_path: Optional[str] = model_path_param(
        'model of the eager-vs-swapped check: a checkpoint folder or "tiny"; None skips the check')
    seed: int = param(0, "seeds the grid's inputs and the model check", min=0, group="Advanced")
    model_dtype: str = param("auto", "dtype of the model check: auto (bfloat16 on an NPU, the dtype it "
                                     "trains and serves in; float32 elsewhere), float32, bfloat16 or float16",
                             choices=("auto", "float32", "bfloat16", "float16"), group="Model check")
    flash_attn_version: Optional[str] = param(
        None, "the flash-attn API the drop-in serves (the version the model pins); None: the default",
        nonempty=True, group="Advanced")
    port: bool = param(True, "when code_path names your code: port a copy of it (hyport port) beside "
                             "the results (the port is proven only with port_proof)", group="Port")
    port_proof: bool = param(False, "prove the port on a tiny model: imports and runs code_path's model "
                                    "code (original and ported), in a child process; off unless you "
                                    "turn it on", group="Port")
    port_proof_timeout_s: float = param(600, "the port proof's time limit in seconds; past it the "
                                             "proof's process group is killed and the proof FAILs",
                                        min_exclusive=0, group="Port")
    port_proof_config: dict = param({}, "config fields of the port proof's tiny model, e.g. "
                                        "{rope_scaling: {type: dynamic, factor: 2.0}}", group="Port")
    card_memory_gib: Optional[float] = card_memory_param()
    trust_remote_code: bool = trust_remote_code_param(
        "the model check loads the checkpoint's own code (with the flash_attn shim); off unless you turn it on",
        group="Model check")

    def check(self) -> None:
        """The grid's dtypes are known ones, each once; a flash-attn version reads as one
        (its number decides how many values ``unpad_input`` returns)."""
        if isinstance(self.model_path, str) and self.model_path.strip().lower() == "none":
            self.model_path = None  # the text a notebook or profile writes for "skip the check"
        problems = []
        if not self.dtypes or any(d not in DTYPES for d in self.dtypes) \
                or len(set(self.dtypes)) != len(self.dtypes):
            problems.append(f"dtypes={self.dtypes!r}: expected a non-empty list of "
                            f"{', '.join(DTYPES)}, each once")
        if self.flash_attn_version is not None and not version_tuple(self.flash_attn_version):
            problems.append(f"flash_attn_version={self.flash_attn_version!r}: expected a flash-attn "
                            "version such as '2.6.3' (or null: the drop-in's default)")
        if any(not isinstance(key, str) or not key.strip() for key in self.port_proof_config):
            problems.append(f"port_proof_config={self.port_proof_config!r}: expected config field "
                            "names (strings) as keys")
        if problems:
            raise ParameterError(problems)
