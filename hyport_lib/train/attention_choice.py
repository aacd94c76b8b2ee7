"""Which attention the workers run, decided before launch and proven on the user's model.

Packing needs hyport's attention (it keeps packed samples apart from the cumulative
lengths); an unpacked run uses it when ``attn_implementation`` names it. Either way the
swap first proves itself (:func:`hyport_lib.models.attention_proof.prove_swap`) on the
model shrunk from its own config and the first batch the collator makes from the data.
A proof that does not pass is a decision stated in the plan, never a launch that dies at
step 1 or trains a different model:

* packing: the run stops before launch (exit 2), with the proof's reason and the way out
  (``packing=False``, which keeps the model on eager attention);
* an unpacked run that asked for hyport's attention keeps eager attention instead, and
  the plan says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from hyport_lib.models.attention_proof import AttentionProof, prove_swap
from hyport_lib.models.loading import LoadedProcessor, build_empty_model
from hyport_lib.models.preflight import check_attn_implementation
from hyport_lib.models.training_inputs import rope_positions_function
from hyport_lib.train.packing import make_collator, training_rows
from hyport_lib.train.params import Params
from hyport_lib.train.samples import Encoder

#: The registered names the workers use, by FlashAttnAPI backend.
SWAPPED_NAMES = {"npu": "hyport_npu_fused", "sdpa": "hyport_torch"}


@dataclass
class AttentionChoice:
    """``attn_implementation`` and FlashAttnAPI backend of the workers, the proof behind
    them (None when no swap was asked for) and the plan's note."""

    attn_implementation: str
    backend: str
    proof: Optional[AttentionProof] = None
    note: str = ""


class SwapRefused(ValueError):
    """Packing needs hyport's attention, and on this model it did not prove itself."""


def choose_attention(params: Params, backend_kind: str, model_path: str, loaded: LoadedProcessor,
                     records: Sequence, skip: Sequence[int]) -> AttentionChoice:
    """The workers' attention (see the module docstring).

    Raises:
        SwapRefused: packing, and the proof did not pass.
        ValueError: an ``attn_implementation`` no process could load.
    """
    api_backend = "npu" if backend_kind == "npu" else "sdpa"
    wanted = params.attn_implementation
    if not params.packing:
        check_attn_implementation(wanted)
        if not wanted.startswith("hyport"):
            return AttentionChoice(wanted, api_backend)
    name = wanted if (not params.packing and wanted.startswith("hyport")) else SWAPPED_NAMES[api_backend]
    batch, samples = first_batch(params, model_path, loaded, records, skip)
    # The plan never touches a card: on an NPU host the proof runs hyport's CPU emulation
    # of npu_fusion_attention, the mapping the fused kernel gets.
    proof = prove_swap(model_path, batch, backend="npu-emulated" if api_backend == "npu" else "sdpa",
                       trust_remote_code=params.trust_remote_code, traits=loaded.traits, seed=params.seed,
                       samples=samples)
    if proof.passed:
        return AttentionChoice(name, api_backend, proof, proof.line())
    if params.packing:
        raise SwapRefused(f"packing=True needs hyport's attention, which does not compute this model's "
                          f"attention exactly: {proof.line()}; train with packing=False (the model "
                          f"then keeps attn_implementation='eager')")
    return AttentionChoice("eager", api_backend, proof,
                           f"attn_implementation={wanted!r} not used: {proof.line()}; the run keeps "
                           f"eager attention")


def first_batch(params: Params, model_path: str, loaded: LoadedProcessor, records: Sequence,
                skip: Sequence[int]) -> tuple[dict, Optional[list[list[dict]]]]:
    """The first batch of rank 0, as its collator makes it: the records in order (bad ones
    skipped as the workers skip them), encoded as the workers encode them (an M-RoPE
    model's packed rows with the positions the model computes for each sample), cut into
    rows and collated. With packing, also each row's samples collated alone (the proof's
    eager reference: each sample trained by itself); None without."""
    positions = None
    if params.packing:  # as the workers do; get_rope_index reads the config only, so the
        # module tree without weights serves it
        positions = rope_positions_function(build_empty_model(model_path,
                                                              trust_remote_code=params.trust_remote_code))
    encoder = Encoder(loaded, params.max_seq_len, params.overflow, positions=positions)
    wanted_rows = params.per_device_train_batch_size
    skipped = set(skip)
    samples, rows = [], []
    for record in records:
        if record.index in skipped:
            continue
        sample, _ = encoder.encode(record)
        if sample is None:
            continue
        samples.append(sample)
        rows = training_rows(samples, params.max_seq_len, params.packing)
        if len(rows) > wanted_rows:  # the first rows are complete once a later one starts
            break
    if not rows:
        raise ValueError("attention proof: no record encodes into a training row")
    collator = make_collator(encoder.pad_id, params.max_seq_len, params.packing,
                             mrope_text_row=loaded.traits.mrope_text_row)
    rows = rows[:wanted_rows]
    if not params.packing:
        return collator(rows), None
    alone = make_collator(encoder.pad_id, params.max_seq_len, packing=False)
    return collator(rows), [[alone([sample]) for sample in row] for row in rows]
