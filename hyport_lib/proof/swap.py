"""The swap proves itself on the user's model before any worker starts (:func:`prove_swap`;
docs/attention_swap.md, "The proof before launch"). On the CPU in float32, also on an NPU
host: the planning process never touches a card, so workers start on clean devices.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from hyport_lib.models.families import ModelTraits
from hyport_lib.models.loading import auto_model_class, traits_of
from hyport_lib.models.model_cache import default_cache_root
from hyport_lib.npu_attention import hf_integration
from hyport_lib.npu_attention.hf_integration import REGISTERED, register_hyport_attention, sdpa_refusal
from hyport_lib.proof import isolation, kept_weights, runs, shrunk, tolerance
from hyport_lib.proof.isolation import Isolation, check_isolation, packing_fault
from hyport_lib.checkpoint_files.weight_files import CheckpointFiles, checkpoint_files
from hyport_lib.proof.kept_weights import keep_checkpoint_weights
from hyport_lib.proof.shrunk import compact_vocabulary, shrunk_config, special_token_ids
from hyport_lib.proof.tolerance import DECODING, GRADIENTS, LOGITS, LOSS, compare, noise_bound
from hyport_lib.results import FAIL, PASS, REFUSED
from hyport_lib.utils.bounded_files import open_regular
from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.imports import package_version
from hyport_lib.utils.printable import first_line
from hyport_lib.utils.redact import scrub_text
from hyport_lib.utils.typed_records import from_mapping, to_mapping
from hyport_lib.utils.wording import counted

#: Bump when the proof's method changes: cached proofs of an older method are not reused.
#: 3: a NaN or an Inf in logits, loss or gradients fails the proof.
#: 4: the shrunk model holds the checkpoint's own weights (kept_weights.py); packed rows
#: are checked for isolation (proof/isolation.py), with eager and the swap; the logits bound
#: is set from float32's own error on the model and batch.
PROOF_VERSION = 4
#: New tokens decoded by an inference proof: the prefill's logits, then DECODE_STEPS - 1
#: cached decoding steps.
DECODE_STEPS = 4
_ID_KEYS = ("input_ids", "labels")
#: hyport's code a proof depends on (the swap's whole package): a change to any proves again.
_OWN_SOURCES = (Path(__file__), Path(shrunk.__file__), Path(tolerance.__file__), Path(kept_weights.__file__),
                Path(isolation.__file__), Path(runs.__file__),
                *sorted(Path(hf_integration.__file__).parent.glob("*.py")))
#: At most this much of a model's own code file goes into the cache key.
_SOURCE_BYTES = 4 << 20


@dataclass
class AttentionProof:
    """What the proof found; ``verdict`` is PASS, FAIL (the swap computes something
    else, or raised) or REFUSED (the model declares it cannot take such a kernel)."""

    model_path: str
    attn_implementation: str
    backend: str
    verdict: str = FAIL
    reason: str = ""
    source: str = "CPU, float32"
    model_class: str = ""
    layers: str = ""
    #: which weights it ran: "checkpoint weights for 212 of 212 tensors", "random weights (seeded): why"
    weights: str = ""
    batch: str = ""
    packed: bool = False
    max_abs_logits: Optional[float] = None
    #: eager's float32 logits against float64 (None: no float64 path), and the logits bound
    #: set from it (docs/attention_swap.md, "The bound on logits")
    float32_noise: Optional[float] = None
    logits_bound: Optional[float] = None
    loss_eager: Optional[float] = None
    loss_swapped: Optional[float] = None
    grad_parameters: int = 0
    grads_only_eager: list = field(default_factory=list)
    grads_only_swapped: list = field(default_factory=list)
    max_rel_grad: Optional[float] = None
    swapped_calls: Optional[int] = None
    #: cached decoding (inference proofs): steps compared and their max |Δ logits|
    decode_steps: int = 0
    max_abs_decode_logits: Optional[float] = None
    seconds: float = 0.0
    cached: bool = False
    #: one-line summaries of the further batches proven beside this one (a VLM's image row)
    also: list = field(default_factory=list)
    #: a packed batch's isolation check, with eager then with the swap
    isolation: list[Isolation] = field(default_factory=list)
    #: why packing is refused: the layer that mixes samples ("" when they stay apart)
    packing_leak: str = ""
    #: eager ran on the batch (and, packed, on its rows): a later failure is the swap's
    eager_ran: bool = False
    #: the first parameter whose gradient is non-finite with eager attention: the model's own
    #: numerics on this batch, which no attention can prove
    eager_non_finite: str = ""

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def line(self) -> str:
        where = f"{self.source}{', cached' if self.cached else ''}"
        if self.verdict != PASS:
            where += f"; {self.weights}" if self.weights else ""
            return f"attention proof {self.verdict} ({where}): {self.reason}"
        decoding = (f", {self.decode_steps} cached decoding steps: max |Δ logits| "
                    f"{self.max_abs_decode_logits:.2e}" if self.decode_steps else "")
        if self.isolation:
            swapped, others = self.isolation[-1], self.isolation[:-1]
            eager = "".join(f"; {i.figure()}{'' if i.passed else ', which mixes them'}" for i in others)
            decoding += (f", samples kept apart by {swapped.attention} (max |Δ logits| when another sample "
                         f"changes or it moves: {swapped.leak:.1e}, float noise allows {swapped.bound:.1g}"
                         f"{eager})")
        bound = ("" if self.logits_bound is None else
                 f" (≤ {self.logits_bound:.1e}, set from float32's own error here, {self.float32_noise:.1e})"
                 if self.float32_noise is not None else f" (≤ {self.logits_bound:g}, no float64 run to measure by)")
        return (f"attention proof PASS ({where}; {self.layers}; {self.weights}; {self.batch}): max |Δ logits| "
                f"{self.max_abs_logits:.2e}{bound}, loss {self.loss_eager:.6f} vs {self.loss_swapped:.6f}, "
                f"same gradient set ({self.grad_parameters} parameters, max rel Δ grad "
                f"{self.max_rel_grad:.1e}){decoding}, {self.seconds:.1f} s")


def _cache_key(model_path: str, config_dict: dict, batch: Mapping, backend: str, name: str,
               extra: Mapping) -> str:
    """What decides a proof, hyport's own proving code included: a change to any proves again."""
    import torch

    digest = hashlib.sha256()
    versions = {p: package_version(p) for p in ("torch", "transformers", "hyport")}
    digest.update(json.dumps({"proof": PROOF_VERSION, "versions": versions, "backend": backend,
                              "name": name, "config": config_dict, "extra": dict(extra),
                              "path": os.path.realpath(model_path)}, sort_keys=True,
                             default=str).encode())
    for source in (*_OWN_SOURCES, *sorted(Path(model_path).glob("*.py"))):
        try:  # a regular file only (a FIFO named *.py would block), its first bytes
            with open_regular(source) as handle:
                digest.update(handle.read(_SOURCE_BYTES))
        except OSError:
            digest.update(f"unreadable {source}".encode())
    for key in sorted(batch):
        value = batch[key]
        digest.update(key.encode())
        if isinstance(value, torch.Tensor):
            digest.update(f"{tuple(value.shape)}{value.dtype}".encode())
            digest.update(value.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()[:32]


def prove_swap(model_path: str, batch: Mapping, *, backend: str, trust_remote_code: bool = False,
               seed: int = 0, use_cache: bool = True,
               samples: Optional[Sequence[Sequence[Mapping]]] = None, decode_steps: int = 0) -> AttentionProof:
    """``backend``: ``sdpa`` or ``npu-emulated``; a model declaring ``_supports_sdpa = False``
    is REFUSED. ``samples``: for a packed ``batch``, each row's samples collated alone (eager's
    reference runs them one by one). ``decode_steps``: also compare this many greedy tokens
    decoded with the KV cache (``batch`` is then a left-padded prompt batch; without
    ``labels``, each real token's next one is its label). Raises
    :class:`~hyport_lib.proof.kept_weights.UnsafeCheckpoint` for a weight file outside the folder."""
    from transformers import AutoConfig

    started = time.perf_counter()
    name = register_hyport_attention(backend)
    proof = AttentionProof(model_path=model_path, attn_implementation=name, backend=backend,
                           source="CPU, float32" + (", NPU attention emulated" if backend == "npu-emulated" else ""))
    config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    if "labels" not in batch:
        batch = {**batch, "labels": _prompt_labels(batch, config.get_text_config().vocab_size)}
    weights = checkpoint_files(model_path)
    key = _cache_key(model_path, config.to_dict(), batch, backend, name,
                     {"trust_remote_code": trust_remote_code, "seed": seed, "samples": samples is not None,
                      "weights": weights.fingerprint(),
                      **({"decode_steps": decode_steps} if decode_steps else {})})
    cached = default_cache_root() / "attention-proofs" / f"{key}.json"
    if use_cache and cached.is_file():
        try:
            found = from_mapping(AttentionProof, json.loads(cached.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            found = None  # an unreadable cache entry (or no proof's) is proven again, and rewritten
        if found is not None and found.model_path:
            found.cached = True
            return found
    traits = traits_of(model_path, trust_remote_code)
    _run_proof(proof, config, batch, samples, name, traits, weights, trust_remote_code, seed, decode_steps)
    proof.seconds = round(time.perf_counter() - started, 2)
    try:  # best effort by design: a cache that cannot be written costs the next launch a proof
        if use_cache:
            cached.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(cached, to_mapping(proof))
    except OSError:
        pass
    return proof


def _prompt_labels(batch: Mapping, text_vocabulary: int):
    """The labels of a left-padded prompt batch. A pad position's output is never read, and
    the one before the first real token predicts it: neither is compared (eager and the swap
    may differ there, to no effect). An image token past the text vocabulary (mllama's
    <|image|>) is no class the language model head predicts."""
    pad = batch["attention_mask"] == 0
    labels = batch["input_ids"].masked_fill(pad, -100)
    labels[:, 1:] = labels[:, 1:].masked_fill(pad[:, :-1], -100)
    return labels.masked_fill(labels >= text_vocabulary, -100)


def _run_proof(proof: AttentionProof, config, batch: Mapping, samples, name: str, traits: ModelTraits,
               weights: CheckpointFiles, trust_remote_code: bool, seed: int, decode_steps: int = 0) -> None:
    """One model (the slim shrink, else the layers-only one when the slim config does not
    build or run): eager forward and backward, then the same weights switched to the swap."""
    full_inputs = runs.model_batch(batch)
    proof.packed = "cu_seq_lens_q" in full_inputs or "attention_mask" not in full_inputs
    full_samples = ([[runs.model_batch(one) for one in row] for row in samples]
                    if proof.packed and samples else None)
    proof.batch = (f"{'packed' if proof.packed else 'padded'} batch {tuple(full_inputs['input_ids'].shape)}"
                   + (f", eager on its {sum(len(r) for r in full_samples)} samples one by one"
                      if full_samples else ""))
    cls = auto_model_class(traits)
    failure = ""
    for slim in (True, False):
        compact = slim and not traits.multimodal  # a VLM's code looks up its image token ids: kept
        batches = [full_inputs, *(one for row in full_samples or [] for one in row)]
        try:
            shrunk = shrink_model(cls, config, slim=slim, seed=seed, trust_remote_code=trust_remote_code,
                                  compact_ids=[b[k] for b in batches for k in _ID_KEYS if k in b] if compact
                                  else None)
        except Exception as exc:  # noqa: BLE001 — the shrink or the model's own code: said below
            failure = f"{type(exc).__name__}: {first_line(exc)}"
            continue
        model, small, proof.layers = shrunk.model, shrunk.config, shrunk.layers
        inputs, per_sample = shrunk.mapped(full_inputs), ([[shrunk.mapped(one) for one in row] for row in full_samples]
                                                          if full_samples else None)
        try:
            proof.weights = shrunk.keep_weights(weights).line()
        except Exception as exc:  # noqa: BLE001 — a weights file that does not read (cut, corrupt)
            proof.reason = scrub_text(f"the proof could not run: the checkpoint's weights could not be read "
                                      f"({type(exc).__name__}: {first_line(exc)})")[:400]
            return
        try:
            proof.model_class = type(model).__name__
            refusal = sdpa_refusal(model)
            if refusal:
                proof.verdict, proof.reason = REFUSED, refusal
                return
            eager_out = runs.forward_backward(model, inputs, per_sample)
            eager_decoding = runs.decode_logits(model, inputs, decode_steps) if decode_steps else None
            if proof.packed:
                proof.isolation = [_isolation(model, "eager", small, inputs, per_sample)]
            proof.eager_ran = True
            break
        except Exception as exc:  # noqa: BLE001 — the shrink or the model's own code: said below
            failure = f"{type(exc).__name__}: {first_line(exc)}"
    else:
        proof.reason = scrub_text(f"the proof could not run: eager on the model shrunk from its config "
                                  f"raised {failure}")[:400]
        return
    proof.float32_noise = runs.float32_noise(model, inputs, per_sample, eager_out[0])
    model = switch_attention(model, name, lambda: shrunk.build(name))
    if model.config._attn_implementation != name:
        proof.reason = f"the model runs {model.config._attn_implementation!r}, not {name!r}"
        return
    api = REGISTERED[name]
    calls = api.calls.total()
    running = "the model with the swapped attention"
    try:
        swapped_out = runs.forward_backward(model, inputs, None, lengths=eager_out[3] if proof.packed else None)
        proof.swapped_calls = api.calls.total() - calls
        if proof.packed:
            running = "the isolation check with the swapped attention"
            proof.isolation.append(_isolation(model, name, small, inputs, per_sample))
        if eager_decoding is not None:
            running = "cached decoding with the swapped attention"
            swapped_decoding = runs.decode_logits(model, inputs, decode_steps)
    except Exception as exc:  # noqa: BLE001 — any raise of the swapped model is the proof's finding
        # The swap itself, or the model's own code on the packed rows (eager's reference ran
        # each sample alone): either way the workers would raise the same at step 1.
        proof.reason = scrub_text(f"{running} raised {type(exc).__name__}: {first_line(exc)}")[:400]
        return
    problems = _compare(proof, eager_out, swapped_out)
    if eager_decoding is not None:
        problems += _compare_decoding(proof, eager_decoding, swapped_decoding)
    fault = packing_fault(*proof.isolation) if proof.isolation else None
    if fault is not None and fault.models:
        # Eager mixes the samples as the swap does (or is non-finite there): the model's own
        # layers, whatever the attention's figures (its row run alone differs by the same leak).
        proof.packing_leak = fault.text
        problems = [fault.text]
    elif fault is not None:  # eager keeps them apart and the swap does not: the attention's
        problems.append(fault.text)
    proof.verdict = FAIL if problems else PASS
    proof.reason = "; ".join(problems)
    if proof.packed and not proof.eager_non_finite and runs.first_non_finite(swapped_out[2]):
        _eager_on_packed_rows(proof, model, lambda: shrunk.build("eager"), inputs,
                              eager_out[3])


def _isolation(model, attention: str, config, inputs: dict, per_sample) -> Isolation:
    return check_isolation(model, inputs, attention, [len(row) for row in per_sample] if per_sample else None,
                           special_token_ids(config))


@dataclass
class ShrunkModel:
    """The proof's model: ``config`` shrunk (shrunk.py), built with seeded weights until
    :meth:`keep_weights` copies in the checkpoint's. Stage 02's numerics check runs it too."""

    model: object
    config: object  # the shrunk config (its vocabulary compacted where ``remap`` is set)
    full_config: object
    layers: str  # what was kept, in words
    build: Callable[[str], object]  # the same shrunk config built again under an attention
    remap: Optional[Callable] = None  # checkpoint ids -> the compact vocabulary's
    vocabulary: Optional[list] = None  # the checkpoint ids of the compact vocabulary's rows

    def mapped(self, batch: Mapping) -> dict:
        """``batch`` with its token ids in the model's vocabulary."""
        if self.remap is None:
            return dict(batch)
        return {k: (self.remap(v) if k in _ID_KEYS else v) for k, v in batch.items()}

    def keep_weights(self, files: CheckpointFiles) -> kept_weights.KeptWeights:
        """The checkpoint's values of every tensor the model keeps (raises where a file does not read)."""
        return keep_checkpoint_weights(self.model, files, self.full_config, self.config, self.vocabulary)


def shrink_model(cls, config, *, slim: bool, seed: int, trust_remote_code: bool,
                 compact_ids: Optional[Sequence] = None) -> ShrunkModel:
    """``config`` cut to a few layers (``slim``: MLPs and experts too), its vocabulary cut to
    the ids of ``compact_ids`` (tensors) where given, built in float32 with seeded weights."""
    small, layers = shrunk_config(config, slim=slim)
    remap = vocabulary = None
    if compact_ids is not None:
        small, remap, vocabulary = compact_vocabulary(small, compact_ids)
        layers += ", vocabulary cut to the batch's tokens"
    model = _build(cls, small, seed, trust_remote_code)
    return ShrunkModel(model, small, config, layers,
                       lambda attention: _build(cls, small, seed, trust_remote_code, attention), remap, vocabulary)


def shrunk_parameters(cls, config, *, vocabulary_rows: Optional[int], trust_remote_code: bool = False) -> int:
    """Parameters of the slim shrink of ``config``, counted on the meta device (nothing is
    allocated); ``vocabulary_rows``: the compact vocabulary's size at most (None: kept whole)."""
    from accelerate import init_empty_weights

    small, _ = shrunk_config(config, slim=True)
    text = getattr(small, "text_config", None) or small
    if vocabulary_rows is not None and isinstance(getattr(text, "vocab_size", None), int):
        text.vocab_size = min(text.vocab_size, vocabulary_rows)
    with init_empty_weights():
        model = cls.from_config(small, trust_remote_code=trust_remote_code)
    model.tie_weights()
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def switch_attention(model, name: str, rebuild: Callable[[], object]):
    """``model``'s weights under attention ``name``: the same model switched where
    transformers can switch it (one model in memory), else ``rebuild()`` given the same weights
    (code transformers cannot tell follows its AttentionInterface, remote code among them).
    The caller checks that the model it gets runs ``name``."""
    model.set_attn_implementation(name)
    if model.config._attn_implementation == name:
        return model
    swapped = rebuild()
    swapped.load_state_dict(model.state_dict())
    return swapped


def _build(cls, config, seed: int, trust_remote_code: bool, attn_implementation: str = "eager"):
    import torch

    torch.manual_seed(seed)
    model = cls.from_config(copy.deepcopy(config), attn_implementation=attn_implementation,
                            trust_remote_code=trust_remote_code)
    return model.float().eval()  # eval: no dropout, so the two runs draw nothing random


def _compare(proof: AttentionProof, eager_out, swapped_out) -> list[str]:
    """The forward's figures set on ``proof``; what differs from eager, in words."""
    import torch

    logits_e, loss_e, grads_e, _ = eager_out
    logits_s, loss_s, grads_s, _ = swapped_out
    shared = sorted(set(grads_e) & set(grads_s))
    peak = max((float(row.nan_to_num(0.0, 0.0, 0.0).abs().max()) for row in logits_e if row.numel()), default=0.0)
    logits = compare(LOGITS, logits_e, logits_s, measured_bound=None if proof.float32_noise is None
                     else noise_bound(proof.float32_noise, peak))
    proof.logits_bound = logits.bound
    loss = compare(LOSS, torch.tensor(loss_e), torch.tensor(loss_s))
    grads = compare(GRADIENTS, [grads_e[n] for n in shared], [grads_s[n] for n in shared])
    proof.max_abs_logits, proof.loss_eager, proof.loss_swapped = logits.max_abs, loss_e, loss_s
    proof.grads_only_eager = sorted(set(grads_e) - set(grads_s))[:5]
    proof.grads_only_swapped = sorted(set(grads_s) - set(grads_e))[:5]
    proof.grad_parameters, proof.max_rel_grad = len(shared), grads.relative
    problems = []
    if proof.swapped_calls == 0:
        problems.append("the swapped model never called hyport's attention (its code bypasses "
                        "the attention interface)")
    if not loss.finite:
        problems.append(f"a non-finite loss (eager {loss_e}, swapped {loss_s})")
    elif not loss.passed:
        problems.append(f"loss {loss_s:.6f} vs eager {loss_e:.6f}")
    if not logits.passed:
        problems.append(logits.differs("logits"))
    if proof.grads_only_eager or proof.grads_only_swapped:
        problems.append(f"other gradient set (only eager: {proof.grads_only_eager or 'none'}; only "
                        f"swapped: {proof.grads_only_swapped or 'none'})")
    if not grads.passed and grads.finite:  # relative to the largest gradient, not to a bound
        problems.append(f"gradients differ from eager by {grads.relative:.3g} of the largest")
    elif not grads.passed:
        proof.eager_non_finite = runs.first_non_finite(grads_e)
        problems.append(_NON_FINITE_EAGER.format(first=proof.eager_non_finite, where="")
                        if proof.eager_non_finite else
                        f"non-finite gradients with the swapped attention (first: {runs.first_non_finite(grads_s)})")
    return problems


_NON_FINITE_EAGER = ("the model's own gradients are non-finite{where} with eager attention too (first: "
                     "{first}): its layers on this batch, not the attention")


def _eager_on_packed_rows(proof: AttentionProof, model, rebuild, inputs: dict, lengths) -> None:
    """The swap's gradients are non-finite on the packed rows and eager's, on each sample
    alone, are not: eager on the same rows tells the model's own numerics there (Gemma 3n's
    AltUp divides by the root mean square of a token's state, infinite in its gradient at a
    pad token whose embedding is zero) from the attention's."""
    model = switch_attention(model, "eager", rebuild)
    first = runs.first_non_finite(runs.forward_backward(model, inputs, None, lengths=lengths)[2])
    if first:
        proof.eager_non_finite = first
        proof.reason = _NON_FINITE_EAGER.format(first=first, where=" on the packed rows")


def _compare_decoding(proof: AttentionProof, eager: list, swapped: list) -> list[str]:
    """The steps past the prefill (the forward's, compared already)."""
    if len(eager) != len(swapped):
        return [f"cached decoding ran {len(swapped)} steps, eager {len(eager)}"]
    if len(eager) < 2:
        return ["cached decoding produced no step past the prompt to compare"]
    decoding = compare(DECODING, eager[1:], swapped[1:])
    proof.max_abs_decode_logits, proof.decode_steps = decoding.max_abs, len(eager) - 1
    return [] if decoding.passed else [
        f"cached decoding: {decoding.differs('logits')} within {counted(proof.decode_steps, 'step')}"]
