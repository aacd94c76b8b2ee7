"""Stage 03's parameters: notebook 03's ``parameters`` cell, ``hyport infer``'s flags and
``hyport report -p``'s keys, declared and checked once (see :mod:`hyport_lib.params`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hyport_lib.models.generation_config import DEFAULT_BATCH_PROMPTS
from hyport_lib.npu_attention.runnable import attention_offered
from hyport_lib.params import (
    ParameterError, StageParams, attn_implementation_param, card_memory_param, device_param, dtype_param,
    model_path_param, num_cards_param, param, trust_remote_code_param,
)
from hyport_lib.utils.values import as_flag


@dataclass
class Params(StageParams):
    device: str = device_param()
    model_path: str = model_path_param()
    num_cards: Optional[int] = num_cards_param()
    card_memory_gib: Optional[float] = card_memory_param()
    single_prompt: str = param("Describe the image.", "the prompt of the single image + text inference",
                               nonempty=True)
    # Built from the library's default batch, not written out again: the workers fit the
    # default batch to a model that cannot take all of it, and they know it by its value.
    batch_prompts: list = param([list(pair) for pair in DEFAULT_BATCH_PROMPTS],
                                "the batch: [text, uses_image] pairs (a bare text is a text-only prompt)",
                                group="Prompts")
    image: Optional[str] = param(None, "an image file for every image prompt; None: the built-in sample picture",
                                 nonempty=True, path="file", must_exist=True, group="Prompts")
    max_new_tokens: int = param(16, "tokens generated per answer", min=1)
    warmup_runs: int = param(1, "untimed generate calls first: the first call measures start-up", min=0,
                             group="Advanced")
    skip_not_applicable: bool = param(False, "leave out prompts this model cannot take instead of refusing them",
                                      group="Prompts")
    enable_thinking: bool = param(False, "passed to the chat template (models that can think before answering)",
                                  group="Prompts")
    dtype: str = dtype_param("float32")
    attn_implementation: str = attn_implementation_param(
        attention_offered, "auto",
        doc="auto (on an NPU hyport_npu_fused once it proves itself on this model, else eager) | "
            "eager | sdpa | a hyport name (proven first)")
    infer_timeout_s: float = param(300, "seconds per card; the grid returns within about this long", min_exclusive=0,
                                   group="Advanced")
    allow_busy_cards: bool = param(False, "also run on cards another process holds (nothing is ever killed)",
                                   group="Advanced")
    trust_remote_code: bool = trust_remote_code_param()
    allow_download: bool = param(False, "a model_path that is no folder may be a hub id to download", group="Advanced")
    log_dir: Optional[str] = param(None, "folder for card<N>.log / card<N>.json; None: a fresh folder beside the "
                                   "results (nnodes > 1: the folder on shared storage where the hosts meet, "
                                   "required outside a report run, whose default is <run>/inference_logs)",
                                   path="dir", output=True, group="Advanced")
    # Several hosts, each running its own cards (no launcher between them): they meet in log_dir.
    nnodes: int = param(1, "hosts in the job: each runs its own cards, node 0 merges their tables into one grid "
                           "(nnodes > 1: log_dir names a folder on storage every host sees)", min=1,
                           group="Several hosts")
    node_rank: int = param(0, "this host's place in the job, 0 .. nnodes-1: node 0 merges and records the job", min=0,
                           group="Several hosts")
    nodes_wait_s: float = param(600, "nnodes > 1: seconds a node waits for node 0's token in log_dir, and node 0, "
                                     "after its own cards, for the other hosts' tables", min_exclusive=0,
                                     group="Several hosts")

    def check(self) -> None:
        """A ``node_rank`` below ``nnodes`` (the shared ``log_dir`` of several hosts: the plan). Each
        item of the batch becomes a ``[text, uses_image]`` pair: from a pair (its flag
        may be text, as YAML or papermill hand it over), a bare text (text-only) or a
        ``{"text", "image"}`` mapping; a ParameterError names the item (``batch_prompts[1]``)."""
        if self.node_rank >= self.nnodes:
            raise ParameterError([f"node_rank={self.node_rank}: must be below nnodes={self.nnodes}"])
        if not self.batch_prompts:
            raise ParameterError([f"batch_prompts={self.batch_prompts!r}: expected at least one [text, uses_image] pair"])
        pairs = []
        for i, item in enumerate(self.batch_prompts):
            name = f"batch_prompts[{i}]"
            if isinstance(item, str):
                text, uses_image = item, False
            elif isinstance(item, dict) and set(item) <= {"text", "image"}:
                text, uses_image = item.get("text"), item.get("image", False)
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                text, uses_image = item
            else:
                raise ParameterError([f"{name}={item!r}: expected [text, uses_image]"])
            if not isinstance(text, str) or not text.strip():
                raise ParameterError([f"{name}={item!r}: expected a non-empty text"])
            try:
                pairs.append([text, as_flag(name, uses_image)])
            except ValueError as exc:
                raise ParameterError([str(exc)]) from None
        self.batch_prompts = pairs
