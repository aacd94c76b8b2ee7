"""Stage 02's model check: the user's checkpoint, eager then switched to hyport's attention
(docs/attention_swap.md, "Stage 02 sees what training sees").

The numerics (logits, greedy tokens, a packed row) run on the training proof's shrunk model
with the checkpoint's own weights for the layers it keeps (proof/swap.py), so their cost does
not grow with the model. Behaviour runs on the whole model, on pretrained weights only: their
logits are peaked, so the same greedy answers and the same perplexity of a fixed text say that
the swapped model *behaves* as the original. Random weights give flat logits (a greedy token
flips on a rounding difference, a perplexity is the vocabulary size): the record says why
nothing is compared. The whole model is loaded once, in the check's dtype, and switched in
place: eager, then the swap; then cast to bfloat16 (what an NPU runs), eager, then the swap.
Where the memory model says it does not fit (model_check_memory.py), it is left out, and the
record says why."""

from __future__ import annotations

import contextlib
import sys
from types import SimpleNamespace
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch

from hyport_lib.checkpoint_files.weight_files import checkpoint_files
from hyport_lib.models.loading import auto_model_class, load_processor, tokenizer_of
from hyport_lib.models.prompts import Prompt, encode_prompts, needs_image, sample_image
from hyport_lib.models.tiny import random_weights_reason, resolve_model_path
from hyport_lib.models.training_inputs import packed_positions, rope_positions_function
from hyport_lib.npu_attention import hf_integration
from hyport_lib.npu_attention.hf_integration import sdpa_refusal
from hyport_lib.npu_attention.flash_api import DEFAULT_VERSION, callers_shim_kept, install_flash_attn_shim
from hyport_lib.port.generated.flash_attn_ascend import FlashAttnUnsupported
from hyport_lib.proof.behaviour import Behaviour, on_device, swap_calls, whole_model_behaviour
from hyport_lib.proof.choice import KEPT_ON_EAGER
from hyport_lib.proof.isolation import Isolation, check_isolation, packing_fault
from hyport_lib.proof.shrunk import special_token_ids
from hyport_lib.proof.swap import ShrunkModel, shrink_model, switch_attention
from hyport_lib.proof.tolerance import LOGITS, TOLERANCE, TOP1, compare
from hyport_lib.results import FAIL, PASS, REFUSED, SKIP, WARN
from hyport_lib.utils.printable import first_line

#: The longest packed row the check runs (a window longer than this is said, not exercised).
PACKED_ROW_LIMIT = 1024
PACKED_TEXT = ("The robot looks at the scene, plans the next step and moves its hand to the handle. "
               "Attention uses queries, keys and values; the mask keeps the model from seeing the future.")
@dataclass
class ModelComparison:
    """Eager vs swapped attention on one model (logits and greedy generation)."""

    model_path: str
    attn_implementation: str
    backend: str
    dtype: str
    device: str
    max_abs_logits: Optional[float] = None
    top1_agreement: Optional[float] = None
    kl_divergence: Optional[float] = None  # mean KL(eager || swapped) over real tokens
    greedy_identical: Optional[bool] = None
    new_tokens: int = 0
    positions: int = 0
    verdict: str = SKIP
    detail: str = ""
    source: str = ""
    swapped_calls: Optional[int] = None  # swapped-attention calls one forward made
    trust_remote_code: bool = False  # the checkpoint's own model code was loaded
    model_class: str = ""  # the class that was loaded (a remote one shows its module)
    model_kind: str = ""  # image-text-to-text or text-only
    batch: str = ""  # what the compared batch holds (and which image parts do not apply)
    # The packed row training sees (:func:`_packed_row`).
    packed_tokens: Optional[int] = None
    packed_max_abs_logits: Optional[float] = None
    sliding_window: Optional[int] = None
    packed_detail: str = ""
    packed_refused: bool = False  # the packed row was refused or raised (said in packed_detail)
    #: whether eager, then the swapped model, keep the packed row's samples apart (CPU,
    #: float32 only: the bounds are float32 rounding; empty when not checked)
    packed_isolation: list[Isolation] = field(default_factory=list)
    behaviour: Optional[Behaviour] = None
    #: the model the numerics ran on: the training proof's shrink, with the checkpoint's weights
    numerics_model: str = ""
    #: why the behaviour check on the whole model was left out (it does not fit), with figures
    left_out: str = ""
    #: the memory model's figures for the whole model and the shrunk one (stage 02's plan)
    memory: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def model_check_dtype(asked: str, kind: str) -> str:
    """``auto`` is bfloat16 on an NPU (the dtype a run trains and serves in there), float32
    elsewhere: the check proves the emulated kernel's exactness, which shows best in float32,
    so this ``auto`` follows what is proven, not whether the CPU computes bf16 natively."""
    if asked != "auto":
        return asked
    return "bfloat16" if kind == "npu" else "float32"


def swapped_backend(kind: str) -> tuple[str, str]:
    """(attention backend, torch device) of the check on a host of ``kind``."""
    return ("npu", "npu:0") if kind == "npu" else ("npu-emulated", "cpu")


def _model_inputs(loaded, device) -> tuple[dict, str]:
    """A left-padded batch (padding rows fully masked) and what it holds, in words: an
    image + text prompt beside a text-only one where the model and its processor allow."""
    texts = ["How do I open a fridge?", "Hi"]
    if not loaded.traits.multimodal:
        prompts, held = [Prompt(t) for t in texts], "two text prompts (images not applicable: text-only model)"
    elif needs_image(loaded):
        prompts = [Prompt(t, [sample_image()]) for t in texts]
        held = "two image + text prompts (text-only prompts not applicable: its processor needs an image)"
    else:
        prompts, held = [Prompt(texts[0], [sample_image()]), Prompt(texts[1])], "image + text beside text only"
    return on_device(encode_prompts(loaded, prompts), device), held


@contextlib.contextmanager
def _quiet_loading():
    """No "Loading weights" progress bars in notebook output."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def _remote_code_shim(trust_remote_code: bool, backend: str, version: Optional[str]):
    """With remote code on, the flash_attn shim serves the model code (as a user porting that
    model would have it); yields its FlashAttnAPI (None: remote code off, or a real flash_attn).
    Remote modules that transformers kept in ``sys.modules`` from an earlier shim (its call
    counter, its version's ``unpad_input``) are dropped first, so the code imports this one."""
    if not trust_remote_code:
        yield None
        return
    with callers_shim_kept():
        for name in [n for n in sys.modules if n == "transformers_modules" or n.startswith("transformers_modules.")]:
            del sys.modules[name]
        shim = install_flash_attn_shim(backend, version=version or DEFAULT_VERSION)
        yield sys.modules["flash_attn"].__hyport_api__ if shim.installed else None


def compare_model(model_path: str = "tiny", backend: str = "npu-emulated",
                  dtype: str = "float32", device: str = "cpu", max_new_tokens: int = 8,
                  seed: int = 0, *, trust_remote_code: bool = False,
                  flash_attn_version: Optional[str] = None, behaviour_left_out: str = "") -> ModelComparison:
    """With ``trust_remote_code`` the flash_attn shim (serving ``flash_attn_version``'s API)
    is installed for the checkpoint's own code, and the calls it serves count as swapped.
    ``behaviour_left_out``: why the behaviour check does not run (the whole model does not
    fit: :mod:`.model_check_memory`), said in the record."""
    result = ModelComparison(model_path=model_path, attn_implementation="", backend=backend,
                             dtype=dtype, device=device, trust_remote_code=trust_remote_code,
                             source=f"{backend} ({str(device).split(':')[0].upper()})",
                             left_out=behaviour_left_out)
    with _remote_code_shim(trust_remote_code, backend, flash_attn_version) as shim_api:
        # Looked up at call time: a test swaps the registration for a broken attention.
        result.attn_implementation = hf_integration.register_hyport_attention(backend=backend)
        torch.manual_seed(seed)
        with _quiet_loading():
            return _compare(result, shim_api, max_new_tokens, seed)


def _shrunk_model(result: ModelComparison, loaded, path: str, seed: int, ids) -> Optional[ShrunkModel]:
    """The training proof's shrunk model (proof/swap.py) with the checkpoint's weights for the
    layers it keeps: slim, else layers only where the slim config does not build. None, with
    the verdict and why set, where neither builds or the weights do not read."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, trust_remote_code=result.trust_remote_code)
    cls = auto_model_class(loaded.traits)
    failure = ""
    for slim in (True, False):
        try:
            shrunk = shrink_model(cls, config, slim=slim, seed=seed, trust_remote_code=result.trust_remote_code,
                                  compact_ids=ids if slim and not loaded.traits.multimodal else None)
            break
        except Exception as exc:  # noqa: BLE001 — the shrink or the model's own code: said
            failure = f"{type(exc).__name__}: {first_line(exc)}"
    else:
        result.verdict, result.detail = FAIL, f"the model shrunk from its config does not build: {failure}"
        return None
    try:
        weights = shrunk.keep_weights(checkpoint_files(path)).line()
    except Exception as exc:  # noqa: BLE001 — a weights file that does not read (cut, corrupt)
        result.verdict = FAIL
        result.detail = f"the checkpoint's weights could not be read ({type(exc).__name__}: {first_line(exc)})"
        return None
    result.numerics_model = f"{shrunk.layers}; {weights}"
    return shrunk


def _compare(result: ModelComparison, shim_api, max_new_tokens: int, seed: int) -> ModelComparison:
    """The numerics on the shrunk model, then the behaviour on the whole one (loaded once)."""
    name, generation = result.attn_implementation, {"max_new_tokens": max_new_tokens, "do_sample": False}
    path = resolve_model_path(result.model_path)
    loaded = load_processor(path, trust_remote_code=result.trust_remote_code)
    tokenizer_of(loaded.processor).padding_side = "left"
    result.model_kind = loaded.traits.kind
    full_inputs, result.batch = _model_inputs(loaded, "cpu")
    packed_ids = torch.tensor(loaded.tokenizer(PACKED_TEXT, add_special_tokens=False)["input_ids"])
    shrunk = _shrunk_model(result, loaded, path, seed, [full_inputs["input_ids"], packed_ids])
    if shrunk is None:
        return result
    model = shrunk.model.to(device=result.device, dtype=getattr(torch, result.dtype)).eval()
    result.model_class = f"{type(model).__module__}.{type(model).__qualname__}"
    inputs = on_device(shrunk.mapped(full_inputs), model.device)
    refusal = sdpa_refusal(model)
    if refusal:
        result.verdict, result.detail = REFUSED, f"{refusal}; {KEPT_ON_EAGER}"
        return result
    real = inputs["attention_mask"].bool()
    result.sliding_window = smallest_window(model.config)
    row, result.packed_detail = _packed_row(loaded, result.sliding_window, rope_positions_function(model))
    row = None if row is None else shrunk.mapped(row)
    with torch.no_grad():
        eager_logits, eager_tokens = model(**inputs).logits[real], model.generate(**inputs, **generation).cpu()
        eager_packed = _eager_packed_row(result, model, row)
        isolating = eager_packed is not None and result.dtype == "float32" and model.device.type == "cpu"
        special = special_token_ids(model.config) | _in_vocabulary(shrunk, loaded.tokenizer)
        if isolating:
            result.packed_isolation = [check_isolation(model, row, "eager", None, special)]
        model = switch_attention(model, name, lambda: shrunk.build(name).to(device=result.device,
                                                                           dtype=getattr(torch, result.dtype)))
        result.model_class = f"{type(model).__module__}.{type(model).__qualname__}"
        # Swapped attention reached through transformers (the registered function) or through
        # remote code importing flash_attn (the shim); None: neither is hyport's.
        apis = [a for a in (hf_integration.REGISTERED.get(name), shim_api) if a is not None]
        before = swap_calls(apis)
        try:
            swapped_logits = model(**inputs).logits[real]
        except FlashAttnUnsupported as exc:  # a refused argument or feature, named by the swap
            result.verdict, result.detail = REFUSED, f"{exc}; {KEPT_ON_EAGER}"
            return result
        result.swapped_calls = swap_calls(apis) - before if apis else None
        swapped_tokens = model.generate(**inputs, **generation).cpu()
        swapped_packed = None if eager_packed is None else _swapped_packed_row(result, model, row)
        if isolating and swapped_packed is not None:
            result.packed_isolation.append(check_isolation(model, row, name, None, special))
    active = str(getattr(model.config, "_attn_implementation", "") or "")
    model = shrunk = None  # the whole model's turn: the shrunk one is not kept beside it
    logits = compare(LOGITS, eager_logits, swapped_logits, result.dtype)
    result.max_abs_logits, result.top1_agreement, result.kl_divergence = logits.max_abs, logits.top1, logits.kl
    result.greedy_identical = bool(torch.equal(eager_tokens, swapped_tokens))
    result.new_tokens = int(eager_tokens.shape[1] - inputs["input_ids"].shape[1])
    result.positions = int(real.sum())
    packed = None if swapped_packed is None else compare(LOGITS, eager_packed, swapped_packed, result.dtype)
    if packed is not None:
        result.packed_tokens, result.packed_max_abs_logits = int(row["input_ids"].shape[1]), packed.max_abs
    result.behaviour = _behaviour(result, apis)
    result.verdict, result.detail = _model_verdict(result, active, name, logits, packed)
    if "not applicable" in result.batch:
        result.detail += f"; compared {result.batch}"
    return result


def _in_vocabulary(shrunk: ShrunkModel, tokenizer) -> set[int]:
    """The tokenizer's special ids, as the shrunk model numbers them (those its vocabulary holds)."""
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    if shrunk.vocabulary is None:
        return ids
    position = {old: new for new, old in enumerate(shrunk.vocabulary)}
    return {position[i] for i in ids if i in position}


def _behaviour(result: ModelComparison, apis: list) -> Behaviour:
    """Greedy answers and perplexity on the whole model, or a behaviour that says why they are
    missing (random weights, left out for memory, or raised): the logits' verdict stands.
    ``apis``: the swap's call counters (:func:`~.behaviour.swap_calls`)."""
    reason = random_weights_reason(result.model_path)
    if reason:
        return Behaviour(False, reason)
    if result.left_out:
        return Behaviour(False, f"left out: {result.left_out}")
    try:
        return whole_model_behaviour(result, apis)
    except Exception as exc:  # noqa: BLE001 — the record says why this part is missing
        return Behaviour(False, f"not compared: {type(exc).__name__}: {exc}")


def smallest_window(config) -> Optional[int]:
    """The smallest sliding window any attention layer of the model uses (None: none)."""
    windows = []
    for sub in [config, *(getattr(config, key, None) for key in ("text_config", "vision_config"))]:
        window = getattr(sub, "sliding_window", None) if sub is not None else None
        kinds = getattr(sub, "layer_types", None) if sub is not None else None
        if isinstance(window, int) and window > 0 and (
                not isinstance(kinds, (list, tuple)) or any("sliding" in str(k) for k in kinds)
                or getattr(sub, "use_sliding_window", True)):
            windows.append(window)
    return min(windows) if windows else None


def _packed_row(loaded, window: Optional[int], rope) -> tuple[Optional[dict], str]:
    """One packed row as the training collator makes it, its first sample past the sliding
    window; None and the reason when the window is longer than this check runs on the CPU."""
    first = (window + 8) if window else 48
    if first > PACKED_ROW_LIMIT:
        return None, (f"sliding window of {window} tokens: a row longer than it ({first} tokens) is "
                      f"beyond this check's {PACKED_ROW_LIMIT}-token limit, so the window is not "
                      f"exercised here (training's proof before launch runs the real first batch)")
    tokenizer = loaded.tokenizer
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids = [i for i in tokenizer(PACKED_TEXT, add_special_tokens=False)["input_ids"] if i not in special]
    if not ids:
        return None, "the tokenizer gives no ordinary token for the packed row's text"
    second = 16
    tokens = (ids * (1 + (first + second) // len(ids)))[:first + second]
    position_ids = torch.tensor([list(range(first)) + list(range(second))])
    if rope is not None:  # M-RoPE: each sample's own positions, as the training collator packs them
        # Text tokens only: every token type is 0 (the function passes on the keys the
        # model's get_rope_index takes).
        samples = [SimpleNamespace(rope_positions=rope(part, {"mm_token_type_ids": [0] * len(part),
                                                              "token_type_ids": [0] * len(part)}, {}))
                   for part in (tokens[:first], tokens[first:])]
        position_ids = packed_positions(samples, first + second, loaded.traits.mrope_text_row).unsqueeze(1)
    cu = torch.tensor([0, first, first + second], dtype=torch.int32)
    row = {"input_ids": torch.tensor([tokens]), "position_ids": position_ids,
           "cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": first, "max_length_k": first,
           "use_cache": False}
    said = f"a packed row of {first} + {second} tokens"
    return row, said + (f", the first past the sliding window of {window}" if window else "")


def _eager_packed_row(result: ModelComparison, model, row: Optional[dict]) -> Optional[torch.Tensor]:
    """Each sample run alone through eager: what packing must equal whatever the model's own
    mask code makes of packed positions (some M-RoPE models cannot see them)."""
    if row is None:
        return None
    ids = row["input_ids"].to(model.device)
    first = int(row["cu_seq_lens_q"][1])
    try:
        return torch.cat([model(input_ids=part, use_cache=False).logits[0] for part in (ids[:, :first], ids[:, first:])])
    except Exception as exc:  # noqa: BLE001 — the model's own code refused the row: say so
        result.packed_detail += f": not compared, eager raised {type(exc).__name__}: {str(exc)[:200]}"
        return None


def _swapped_packed_row(result: ModelComparison, model, row: dict) -> Optional[torch.Tensor]:
    said = result.packed_detail
    try:
        return model(**on_device(row, model.device)).logits[0]
    except FlashAttnUnsupported as exc:  # refused by name: the swap cannot serve the row
        result.packed_detail = f"{said}: the swapped attention refused it: {exc}"
    except Exception as exc:  # noqa: BLE001 — e.g. a linear-attention layer that cannot keep
        # packed samples apart: packing this model fails in transformers too. Said, with
        # the padded batch's comparison kept.
        result.packed_detail = (f"{said}: not compared, the model raised {type(exc).__name__} on "
                                f"the packed row: {str(exc)[:200]} (packed training would too)")
    result.packed_refused = True
    return None


def _model_verdict(result: ModelComparison, active: str, name: str, logits, packed) -> tuple[str, str]:
    """The swap must be active and change no token, its logits within tolerance on the
    padded batch and on the packed row; NaN or Inf fails."""
    if result.packed_refused:
        verdict, detail = _padded_verdict(result, active, name, logits)
        return (WARN if verdict == PASS else verdict), f"{detail}; {result.packed_detail}"
    eager_apart, leak = (result.packed_isolation if len(result.packed_isolation) == 2 else (None, None))
    fault = packing_fault(eager_apart, leak) if leak is not None else None
    if fault is not None and fault.models:
        # The model's own layers mix the packed samples, with eager as with the swap (the row
        # alone would differ from its samples whatever the attention): packing is refused, the
        # swap is judged unpacked.
        verdict, detail = _padded_verdict(result, active, name, logits)
        return (WARN if verdict == PASS else verdict), f"{detail}; packed training would be refused: {fault.text}"
    # Eager keeps the samples apart and the swap does not: the attention's own fault.
    swap_fault = [fault.text] if fault is not None else []
    if (packed is not None and not packed.passed) or swap_fault:
        differs = [packed.differs("logits", f" for {result.dtype}")] if packed is not None and not packed.passed else []
        return FAIL, f"{result.packed_detail}: {'; '.join(differs + swap_fault)}"
    verdict, detail = _padded_verdict(result, active, name, logits)
    if verdict != PASS:
        return verdict, detail
    same_dtype = result.behaviour.pairs[0] if result.behaviour and result.behaviour.pairs else None
    if same_dtype and same_dtype.not_compared:
        return WARN, f"{detail}; on real weights, behaviour {same_dtype.not_compared}"
    if same_dtype and not same_dtype.identical:
        diff = same_dtype.first_difference or {}
        return WARN, (f"{detail}; on real weights the swap's greedy answer differs from eager's at "
                      f"token {diff.get('token')} of prompt {diff.get('prompt')}")
    packed_said = (f"; {result.packed_detail}: max |Δ logits| {packed.max_abs:.1e}" if packed is not None
                   else f"; {result.packed_detail}" if result.packed_detail else "")
    if leak is not None:
        packed_said += (f", samples kept apart (a sample's logits moved by {leak.leak:.1e} when another "
                        f"changed or it moved; float noise allows {leak.bound:.1g})")
    return PASS, detail + packed_said


def _padded_verdict(result: ModelComparison, active: str, name: str, logits) -> tuple[str, str]:
    floor = TOLERANCE[result.dtype][TOP1]
    if active != name:
        return FAIL, f"swapped model reports attn_implementation={active!r}, not {name!r}"
    if not logits.finite:
        return FAIL, logits.differs("logits")
    if result.swapped_calls == 0:
        return WARN, ("a forward pass made no call to the swapped attention: the model's code "
                      "bypasses it (often a flash path guarded by `if q.is_cuda:`, which "
                      "silently runs the eager path on an NPU; run `hyport scan` on the model "
                      "code)")
    if logits.top1 < 1.0 or not result.greedy_identical:
        if logits.top1 < floor or floor == 1.0:
            return FAIL, "top-1 or greedy generation differs between eager and swapped attention"
        # In half precision two kernels round differently, and a near-tie flips: a limit of
        # the dtype (eager in bf16 flips against eager in fp32 too), not a wrong attention.
        return WARN, (f"in {result.dtype} the top-1 token differs at {1 - logits.top1:.1%} of "
                      "positions or a greedy token flipped: near-ties rounded differently")
    if not logits.passed:
        return WARN, f"max |Δ logits| above {logits.bound:g} for {result.dtype}"
    return PASS, f"same top-1 and greedy tokens; max |Δ logits| ≤ {logits.bound:g}"
