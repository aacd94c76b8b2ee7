"""Which attention the workers run, decided before launch and proven on the user's model.

Packing needs hyport's attention (it keeps packed samples apart by their cumulative lengths); an
unpacked run uses it when ``attn_implementation`` names it. The swap is first proven on the model
shrunk from its own config and the data's first batch: a proof that does not pass is a decision
stated in the plan, never a launch that dies at step 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from hyport_lib.models.attention_proof import AttentionProof, prove_swap
from hyport_lib.models.loading import LoadedProcessor, build_empty_model
from hyport_lib.models.preflight import check_attn_implementation
from hyport_lib.models.training_inputs import rope_positions_function
from hyport_lib.npu_attention.names import NAME_OF_BACKEND, backend_of, check_runs_on
from hyport_lib.params import AUTO_ATTENTION
from hyport_lib.train.packing import make_collator, training_rows
from hyport_lib.train.params import Params
from hyport_lib.train.samples import Encoder

@dataclass
class AttentionChoice:
    """The workers' attention and FlashAttnAPI backend, the proof behind them and the plan's note."""

    attn_implementation: str
    backend: str
    proof: Optional[AttentionProof] = None
    note: str = ""


class SwapRefused(ValueError):
    """Packing needs hyport's attention, and on this model it did not prove itself."""


def choose_attention(params: Params, backend_kind: str, model_path: str, loaded: LoadedProcessor,
                     records: Sequence, skip: Sequence[int]) -> AttentionChoice:
    """The workers' attention. A failed proof raises :class:`SwapRefused` when packing (the run
    stops before launch, exit 2); an unpacked run then keeps eager attention and the plan says
    why. ValueError: an ``attn_implementation`` no process could load."""
    api_backend = "npu" if backend_kind == "npu" else "sdpa"
    wanted = "eager" if params.attn_implementation == AUTO_ATTENTION else params.attn_implementation
    if not params.packing:
        check_attn_implementation(wanted)
        if not wanted.startswith("hyport"):
            return AttentionChoice(wanted, api_backend)
    if not params.packing and wanted.startswith("hyport"):
        check_runs_on(wanted, backend_kind)
        name, api_backend = wanted, backend_of(wanted)
    else:
        name = NAME_OF_BACKEND[api_backend]
    proofs = []
    for batch, samples in proof_batches(params, model_path, loaded, records, skip):
        # The plan never touches a card: on an NPU host the proof runs hyport's CPU emulation
        # of npu_fusion_attention, the mapping the fused kernel gets.
        proofs.append(prove_swap(model_path, batch, backend="sdpa" if api_backend == "sdpa" else "npu-emulated",
                                 trust_remote_code=params.trust_remote_code, traits=loaded.traits,
                                 seed=params.seed, samples=samples))
        if not proofs[-1].passed:
            break
    proof = proofs[-1] if not proofs[-1].passed else proofs[0]
    proof.also = [p.line() for p in proofs if p is not proof]
    said = "; ".join([proof.line(), *(f"and on an image row: {line}" for line in proof.also)])
    if proof.passed:
        return AttentionChoice(name, api_backend, proof, said)
    if params.packing:
        raise SwapRefused(f"packing=True needs hyport's attention, which does not compute this model's "
                          f"attention exactly: {said}; train with packing=False and "
                          f"attn_implementation='eager'")
    return AttentionChoice("eager", api_backend, proof,
                           f"attn_implementation={wanted!r} not used: {said}; the run keeps eager attention")


#: How many records past the first rows are read to find an image row for the proof.
IMAGE_SEARCH_RECORDS = 256


def proof_batches(params: Params, model_path: str, loaded: LoadedProcessor, records: Sequence,
                  skip: Sequence[int]) -> list[tuple[dict, Optional[list[list[dict]]]]]:
    """What the proof runs: the first ``per_device_train_batch_size`` rows as rank 0's collator
    makes them; for a VLM whose first rows hold no image, also the first row that holds one (the
    Trainer draws rows at random: the vision tower's attention must be proven too). Packed
    batches come with their samples collated alone (the proof's eager reference)."""
    encoder, rows, later, rest = _first_rows(params, model_path, loaded, records, skip)
    batches = [_collated(params, loaded, encoder, rows)]
    if loaded.traits.multimodal and not any(s.pixel_values is not None for row in rows for s in row):
        encoded = (encoder.encode(record)[0] for record in rest[:IMAGE_SEARCH_RECORDS])
        for sample in (*later, *encoded):
            if sample is not None and sample.pixel_values is not None:
                batches.append(_collated(params, loaded, encoder, [[sample]]))
                break
    return batches


def _first_rows(params: Params, model_path: str, loaded: LoadedProcessor, records: Sequence,
                skip: Sequence[int]):
    """``(encoder, the first rows, samples encoded past them, the records not read)``."""
    positions = None
    if params.packing:  # as the workers do; get_rope_index reads the config only, so the
        # module tree without weights serves it
        positions = rope_positions_function(build_empty_model(model_path,
                                                              trust_remote_code=params.trust_remote_code))
    encoder = Encoder(loaded, params.max_seq_len, params.overflow, positions=positions)
    wanted_rows = params.per_device_train_batch_size
    skipped = set(skip)
    samples, rows = [], []
    kept = [r for r in records if r.index not in skipped]
    read = 0
    for record in kept:
        read += 1
        sample, _ = encoder.encode(record)
        if sample is None:
            continue
        samples.append(sample)
        rows = training_rows(samples, params.max_seq_len, params.packing)
        if len(rows) > wanted_rows:  # the first rows are complete once a later one starts
            break
    if not rows:
        raise ValueError("attention proof: no record encodes into a training row")
    first = rows[:wanted_rows]
    used = sum(len(row) for row in first)
    return encoder, first, samples[used:], kept[read:]


def _collated(params: Params, loaded: LoadedProcessor, encoder, rows) -> tuple[dict, Optional[list[list[dict]]]]:
    collator = make_collator(encoder.pad_id, params.max_seq_len, params.packing,
                             mrope_text_row=loaded.traits.mrope_text_row)
    if not params.packing:
        return collator(rows), None
    alone = make_collator(encoder.pad_id, params.max_seq_len, packing=False)
    return collator(rows), [[alone([sample]) for sample in row] for row in rows]
