"""Which attention the inference workers run, decided before any worker starts.

``auto`` (the default) runs hyport's fused attention on an NPU (what stage 03 exists to
show), eager elsewhere. A hyport attention first proves itself on the user's model and the
grid's own prompts, prefill and cached decoding
(:func:`~hyport_lib.models.attention_proof.prove_swap`); a proof that does not pass keeps
eager, and the plan says why: never a grid answering through an attention that computes
something else.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hyport_lib.models.attention_proof import AttentionProof, prove_swap
from hyport_lib.models.decode_proof import DECODE_STEPS
from hyport_lib.models.generation import batch_prompts, single_prompt
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.loading import load_processor, tokenizer_of
from hyport_lib.models.preflight import check_attn_implementation
from hyport_lib.models.prompts import PromptNotApplicable, encode_prompts
from hyport_lib.models.tiny import resolve_model_path
from hyport_lib.npu_attention.names import BACKEND_OF_NAME, NAME_OF_BACKEND, backend_of, check_runs_on
from hyport_lib.params import AUTO_ATTENTION
from hyport_lib.utils.printable import first_line
from hyport_lib.utils.redact import scrub_text

#: What ``auto`` runs on each device kind when the proof passes (eager where absent).
AUTO_SWAP = {"npu": NAME_OF_BACKEND["npu"]}


@dataclass
class InferenceAttention:
    """The workers' ``attn_implementation``, the proof behind it (None when no swap was
    asked for) and the plan's note ("" when there is nothing to say)."""

    asked: str
    attn_implementation: str
    proof: Optional[AttentionProof] = None
    note: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)  # the proof too, as AttentionProof.to_dict gives it


def choose_attention(asked: str, backend_kind: str, config: InferenceConfig) -> InferenceAttention:
    """The workers' attention for ``asked`` on ``backend_kind``; a hub id is never proven
    (eager). Raises ValueError for a name no worker could load or this device cannot run."""
    if asked == AUTO_ATTENTION:
        wanted = AUTO_SWAP.get(backend_kind)
        if wanted is None:
            return InferenceAttention(asked, "eager")
    else:
        check_attn_implementation(asked)
        if asked not in BACKEND_OF_NAME:
            return InferenceAttention(asked, asked)
        check_runs_on(asked, backend_kind)
        wanted = asked
    # A swap proves itself on the model's folder ("tiny" is built for it, into hyport's cache).
    config = dataclasses.replace(config, model_path=resolve_model_path(config.model_path))
    if not Path(config.model_path).is_dir():
        return InferenceAttention(asked, "eager", None, f"{wanted} not used: model_path is not a local folder, "
                                                        "so the swap cannot be proven before the grid; the grid "
                                                        "keeps eager attention")
    try:
        proof = _prove(wanted, config)
    except Exception as exc:  # noqa: BLE001 — the model's processor or config: said, and eager kept
        return InferenceAttention(asked, "eager", None, scrub_text(
            f"{wanted} not used: its proof could not run ({type(exc).__name__}: {first_line(exc)}); the grid keeps "
            "eager attention")[:400])
    if proof.passed:
        return InferenceAttention(asked, wanted, proof, f"{wanted}: {proof.line()}")
    return InferenceAttention(asked, "eager", proof, f"{wanted} not used: {proof.line()}; the grid keeps "
                                                     "eager attention")


def _prove(name: str, config: InferenceConfig) -> AttentionProof:
    """The swap against eager on the grid's prompts: the single prompt and the batch, each
    encoded as the workers encode them."""
    from transformers import AutoConfig

    loaded = load_processor(config.model_path, trust_remote_code=config.trust_remote_code)
    tokenizer_of(loaded.processor).padding_side = "left"
    try:
        prompts = [[single_prompt(loaded, config)]]
    except PromptNotApplicable:
        prompts = []  # the grid leaves it out (skip_not_applicable); the batch is proven
    batch, _ = batch_prompts(loaded, config)
    prompts += [batch] if batch else []
    # The plan never touches a card: on an NPU host the proof runs hyport's CPU emulation.
    backend = "sdpa" if backend_of(name) == "sdpa" else "npu-emulated"
    text_vocabulary = AutoConfig.from_pretrained(
        config.model_path, trust_remote_code=config.trust_remote_code).get_text_config().vocab_size
    proof = None
    for group in prompts:
        inputs = encode_prompts(loaded, group, enable_thinking=config.enable_thinking)
        # Left padding: a pad position's output is never read, and it predicts the first real
        # token; neither is compared (eager and the swap may differ there, to no effect).
        pad = inputs["attention_mask"] == 0
        labels = inputs["input_ids"].masked_fill(pad, -100)
        labels[:, 1:] = labels[:, 1:].masked_fill(pad[:, :-1], -100)
        # An image token past the text vocabulary (mllama's <|image|>) is no class the
        # language model head predicts.
        labels = labels.masked_fill(labels >= text_vocabulary, -100)
        found = prove_swap(config.model_path, {**inputs, "labels": labels}, backend=backend,
                           trust_remote_code=config.trust_remote_code, traits=loaded.traits,
                           decode_steps=DECODE_STEPS)
        if proof is None or not found.passed:
            proof = found
        if not found.passed:
            break
    if proof is None:
        raise ValueError("attn_implementation: no prompt of this grid fits the model, so the swap cannot be "
                         "proven on it")
    return proof
