"""The parameters of stage 05. The folders default to what stage 04 recorded
(:mod:`hyport_lib.weights.defaults`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hyport_lib.npu_attention.runnable import attention_offered_to_load
from hyport_lib.params import (ParameterError, StageParams, attn_implementation_param, dtype_param, param,
                               trust_remote_code_param)
from hyport_lib.results import TrainedWeights
from hyport_lib.weights.checksums import HASHERS


@dataclass
class Params(StageParams):
    weights_path: Optional[str] = param(
        None, "a checkpoint folder or one .safetensors file; None: stage 04's final weights, "
              "else the tiny model in 2 shards",
        nonempty=True, path="any", written_by=TrainedWeights.STAGE_NAME)
    base_path: Optional[str] = param(
        None, "the model before fine-tuning; None: the model stage 04 started from",
        nonempty=True, path="any", must_exist=True)
    checkpoint_path: Optional[str] = param(
        None, "a folder that should hold the same model; None: stage 04's last checkpoint",
        nonempty=True, path="any", written_by=TrainedWeights.STAGE_NAME)
    full_scan: bool = param(True, "read every tensor: NaN/Inf and a checksum each")
    checksum: str = param(
        "xxh3", "checksum of each tensor in the full scan: xxh3 (XXH3-64, fastest) | crc32 | sha256",
        choices=tuple(HASHERS))
    reload: bool = param(True, "from_pretrained in a fresh process, as the seed did (LOAD_OK)")
    logits_parity: bool = param(
        True, "logits of the weights against the checkpoint (loads both in float32)")
    consolidate_zero: bool = param(
        True, "DeepSpeed zero_to_fp32 on the checkpoint (loads every rank's optimizer states)")
    dtype: str = dtype_param("bfloat16", "dtype of the reload: auto | float32 | bfloat16 | float16", group="Reload")
    attn_implementation: str = attn_implementation_param(
        attention_offered_to_load, doc="attention of the reload (auto: eager), transformers' or hyport's")
    trust_remote_code: bool = trust_remote_code_param(group="Reload")
    reload_timeout_s: float = param(
        600, "limit of each child process (reload, logits parity, consolidation)", min_exclusive=0, group="Reload")

    def check(self) -> None:
        """A ``weights_path`` given without a checkpoint has none (nothing is guessed then):
        ``logits_parity`` is refused here, before a report run trains for hours first."""
        if self.weights_path and not self.checkpoint_path and self.logits_parity:
            raise ParameterError([NO_CHECKPOINT_FOR_LOGITS])


#: Said by :meth:`Params.check` and by the plan (stage 04 recorded no checkpoint).
NO_CHECKPOINT_FOR_LOGITS = ("logits_parity=True compares the logits with a checkpoint's, and there is "
                            "none: give checkpoint_path or set logits_parity=False")
