"""Which attention the workers of stage 03 (the grid) and 04 (training) run, decided before
any worker starts: a swap that does not prove itself keeps eager or refuses packing, never a
launch that dies at step 1 (docs/attention_swap.md, "The proof before launch").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from hyport_lib.models.tiny import resolve_model_path
from hyport_lib.npu_attention.names import BACKEND_OF_NAME, NAME_OF_BACKEND, backend_of
from hyport_lib.npu_attention.runnable import GENERATE, TRAIN, check_attention
from hyport_lib.params import AUTO_ATTENTION, ParameterError
from hyport_lib.proof.swap import DECODE_STEPS, AttentionProof, prove_swap
from hyport_lib.results import REFUSED
from hyport_lib.utils.printable import first_line
from hyport_lib.utils.redact import scrub_text

#: What a model the swap refuses gets in training (stage 02 says it beside its refusal).
KEPT_ON_EAGER = ("training keeps this model on eager attention, so packing (which needs the "
                 "swap) is refused for it")

#: What a proof runs: ``(what the batch is, the batch, each packed row's samples collated
#: alone or None)``; the first batch's words are never said.
ProofBatch = tuple[str, Mapping, Optional[list]]


@dataclass(frozen=True)
class Runner:
    """Who runs the chosen attention: what ``auto`` runs on each device kind (eager where
    absent), how many cached decoding steps its proof compares, what it does with the model
    (``work``: generate or train), and how its notes read."""

    auto: Mapping[str, str]
    decode_steps: int
    work: str
    who: str  # "the grid", "the run"
    passed: str  # the note of a proof that passed: ``{name}``, ``{said}``
    not_used: str  # the note of a swap not used, before "; {who} keeps eager attention"

    def auto_here(self, device_kind: str) -> str:
        """What ``auto`` runs on ``device_kind``, as a refusal names it."""
        name = self.auto.get(device_kind)
        return f"{name} once it proves itself on the model, else eager" if name else "eager"


GRID = Runner(auto={"npu": NAME_OF_BACKEND["npu"]}, decode_steps=DECODE_STEPS, work=GENERATE, who="the grid",
              passed="{name}: {said}", not_used="{name} not used: {said}")
TRAINING = Runner(auto={}, decode_steps=0, work=TRAIN, who="the run", passed="{said}",
                  not_used="attn_implementation={name!r} not used: {said}")


@dataclass
class AttentionChoice:
    """The workers' ``attn_implementation`` and FlashAttnAPI ``backend``."""

    asked: str
    attn_implementation: str
    backend: str
    proof: Optional[AttentionProof] = None  # None when no swap was asked for
    note: str = ""  # the plan's ("" when there is nothing to say)


class SwapRefused(ValueError):
    """Packing needs hyport's attention, and on this model it did not prove itself."""


class PackingRefused(ValueError):
    """A layer of the model lets packed samples reach one another (or reads the position in
    the row), or the model did not run on packed rows: packing would train another model, or
    none, whatever the attention. ``proof``: the proof that found it, with its figures."""

    def __init__(self, message: str, proof: Optional[AttentionProof] = None):
        super().__init__(message)
        self.proof = proof


def choose_attention(asked: str, device_kind: str, runner: Runner, model_path: str,
                     batches: Callable[[str], Sequence[ProofBatch]], *, packing: bool = False,
                     trust_remote_code: bool = False, seed: int = 0) -> AttentionChoice:
    """The workers' attention for ``asked`` on ``device_kind``; ``batches(model folder)``
    makes what the swap is proven on, only when one is wanted. A hub id is never proven
    (eager). Raises ParameterError for a name no worker could load or this device cannot run,
    or, with ``packing``, for one packing would not train with; :class:`SwapRefused` when
    ``packing`` and the swap does not prove itself."""
    default = "npu" if device_kind == "npu" else "sdpa"
    if asked != AUTO_ATTENTION:
        check_attention(asked, device_kind, work=runner.work, auto_here=runner.auto_here(device_kind))
    if packing:
        name = NAME_OF_BACKEND[default]
        if asked not in (AUTO_ATTENTION, "eager", name):  # never trained silently with another
            raise ParameterError([f"attn_implementation={asked!r}: packing=True trains with hyport's "
                                  f"attention ({name}, per sample); use attn_implementation=auto, or "
                                  f"packing=False"])
    elif asked == AUTO_ATTENTION:
        name = runner.auto.get(device_kind)
        if name is None:
            return AttentionChoice(asked, "eager", default)
    else:
        if asked not in BACKEND_OF_NAME:
            return AttentionChoice(asked, asked, default)
        name = asked
    backend = backend_of(name)

    def keep_eager(said: str, proof: Optional[AttentionProof] = None) -> AttentionChoice:
        if packing and proof is not None and proof.packing_leak:
            raise PackingRefused(f"packing=True: {proof.packing_leak}; train with packing=False (one "
                                 f"sample per padded row)", proof)
        if packing and (proof is None or proof.eager_non_finite or (
                proof.verdict != REFUSED and not proof.eager_ran)):
            # The model did not run with eager attention (on its packed rows either), or
            # eager itself is non-finite: the attention is not what failed.
            raise PackingRefused(f"packing=True: this model could not be proven on packed rows: {said}; "
                                 f"train with packing=False", proof)
        if packing:
            raise SwapRefused(f"packing=True needs hyport's attention, which does not compute this model's "
                              f"attention exactly: {said}; train with packing=False and "
                              f"attn_implementation='eager'")
        note = runner.not_used.format(name=name, said=said) + f"; {runner.who} keeps eager attention"
        return AttentionChoice(asked, "eager", backend, proof, note)

    # A swap proves itself on the model's folder ("tiny" is built for it, into hyport's cache).
    folder = resolve_model_path(model_path)
    if not Path(folder).is_dir():
        return keep_eager(f"model_path is not a local folder, so the swap cannot be proven before {runner.who}")
    try:
        proofs = []
        for label, batch, samples in batches(folder):
            # The plan never touches a card: an NPU host proves hyport's CPU emulation.
            proof = prove_swap(folder, batch, backend="sdpa" if backend == "sdpa" else "npu-emulated",
                               trust_remote_code=trust_remote_code, seed=seed, samples=samples,
                               decode_steps=runner.decode_steps)
            proofs.append((label, proof))
            if not proof.passed:
                break
    except Exception as exc:  # noqa: BLE001 — the model's processor or config: said, and eager kept
        if packing:
            raise
        return keep_eager(scrub_text(f"its proof could not run ({type(exc).__name__}: {first_line(exc)})")[:400])
    proof = next((p for _, p in proofs if not p.passed), proofs[0][1])
    proof.also = [p.line() for _, p in proofs if p is not proof]
    said = "; ".join(p.line() if i == 0 else f"and on {label}: {p.line()}" for i, (label, p) in enumerate(proofs))
    if proof.passed:
        return AttentionChoice(asked, name, backend, proof, runner.passed.format(name=name, said=said))
    return keep_eager(said, proof)
