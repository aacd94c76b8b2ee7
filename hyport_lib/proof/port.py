"""The proof of a port: the original code and the ported code, same tiny model, same inputs
(docs/porting.md, "The proof": what each side runs and what decides the verdict).

This runs the user's code in the calling process: callers run it in a child, only when
asked (:mod:`hyport_lib.port.proof_run`).
"""

from __future__ import annotations

import copy
import json
import sys
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import torch

from hyport_lib.backend import get_backend, import_torch_npu
from hyport_lib.npu_attention import emulation
from hyport_lib.npu_attention.flash_api import (DEFAULT_VERSION, FlashAttnAPI, callers_shim_kept,
                                               install_flash_attn_shim, uninstall_flash_attn_shim)
from hyport_lib.proof import port_model
from hyport_lib.proof.port_record import (IMPORT_ORIGINAL, IMPORT_PORTED, RUN_ORIGINAL, RUN_PORTED,
                                          PortProof, ProofCase, build_failure, config_fix)
from hyport_lib.proof.tolerance import COSINE, OUTPUTS, TOLERANCE, compare
from hyport_lib.results import FAIL, PASS, WARN
from hyport_lib.scan.rules import GENERATED_MODULE
from hyport_lib.utils.files import atomic_write_text

GREEDY_STEPS = 4
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: The name of the generated module's case of its own, against hyport's reference semantics of
#: flash-attn: what a tiny model's forward may not reach (:func:`check_functions`).
FUNCTIONS = "attention functions (GQA, windows, Sq != Sk, varlen, 1.x causal, dropout)"


class _ProofFailure(Exception):
    """Ends the proof with a FAIL and a reason."""


class _BuildFailure(Exception):
    """The tiny model could not be built from ``config`` (the cause: the model code's raise)."""

    def __init__(self, config: dict):
        super().__init__("the tiny model could not be built")
        self.config = config


def _frame(exc: BaseException, roots: dict[str, Path]) -> Optional[tuple[str, Path, int, str]]:
    """(tree, file in it, line number, code) of the innermost frame inside the trees."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename)
        for label, root in roots.items():
            if root in path.parents:
                return label, path.relative_to(root), frame.lineno, (frame.line or "").strip()
    return None


def _where(exc: BaseException, roots: dict[str, Path]) -> str:
    found = _frame(exc, roots)
    return "" if found is None else f"{found[0]} {found[1]}:{found[2]} `{found[3]}`"


def _nfa_source(device: torch.device) -> tuple[Optional[object], str, bool]:
    """(what the generated module calls, None: its own torch_npu import; label; emulated)."""
    torch_npu, _ = import_torch_npu()
    if torch_npu is not None and device.type == "npu":
        return None, f"torch_npu.npu_fusion_attention on {device}", False
    if torch_npu is not None and getattr(torch_npu, "__hyport_double__", False):
        return None, ("torch_npu.npu_fusion_attention of the torch_npu test double: hyport's CPU "
                      "emulation of the documented contract (emulated, not an NPU result)"), True
    return emulation.npu_fusion_attention, ("hyport's CPU emulation of "
                                            "torch_npu.npu_fusion_attention (emulated, not an NPU "
                                            "result)"), True


def _greedy(model, ids: torch.Tensor) -> list[int]:
    tokens = ids
    with torch.no_grad():
        for _ in range(GREEDY_STEPS):
            logits = port_model.first_tensor(model(input_ids=tokens, use_cache=False))
            tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], dim=1)
    return tokens[0, ids.shape[1]:].tolist()


@dataclass
class _Run:
    src: Path  # the original tree's folder
    dst: Path
    only: Optional[str]  # one file ported: that file, in both trees
    dtype: torch.dtype
    device: torch.device
    seed: int
    overrides: Optional[dict]
    on_phase: Callable[[str], None]
    config_setting: str = "--proof-config"  # what sets ``overrides``, for the build's error

    @property
    def roots(self) -> dict[str, Path]:
        return {"original": self.src, "port": self.dst}


@dataclass
class _Reference:
    """The original code's half of a proof, which the port must match."""

    choice: port_model.ModelChoice
    kwargs: dict  # of the tiny config
    model: torch.nn.Module
    cases: list[port_model.Batch]
    expected: list[torch.Tensor]
    calls: list[Optional[int]]  # flash-attn calls per case; None where its flash path did not run
    greedy: list[list[int]]


def _forward(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return port_model.first_tensor(model(**batch.inputs, **({"use_cache": False}
                                                                 if batch.kind in ("dense", "padded") else {})))


def _expects_attention(dst: Path) -> bool:
    """The port rewrote flash-attn code (else there is no attention to count)."""
    record = dst / "port.json"
    if not record.is_file():
        return True
    try:
        changes = json.loads(record.read_text(encoding="utf-8")).get("changes") or []
    except ValueError:
        return True
    return any(c.get("kind") == "flash_attn_import" for c in changes if isinstance(c, dict))


def _prove_in(run: _Run) -> PortProof:
    """One proof in one dtype; what it loads is forgotten after, the caller's shim put back."""
    before_modules = set(sys.modules)
    try:
        with callers_shim_kept():
            proof = PortProof(verdict=FAIL, dtype=str(run.dtype).replace("torch.", ""), device=str(run.device))
            # The flash-attn API the code was written against: unpad_input's 4 or 5 values.
            generated = next((p.read_text(encoding="utf-8") for p in run.dst.rglob(f"{GENERATED_MODULE}.py")), "")
            version = "2.6.3" if "UNPAD_INPUT_RETURNS = 4\n" in generated else DEFAULT_VERSION
            shim = install_flash_attn_shim("sdpa", force=True, version=version)
            if not shim.installed:
                raise _ProofFailure(f"the flash_attn shim could not be installed: {shim.reason}")
            reference = _reference(run, proof)
            uninstall_flash_attn_shim()
            with port_model.without_flash_attn():
                return _prove_port_side(run, proof, reference, _expects_attention(run.dst))
    finally:
        for key in [k for k in sys.modules if k not in before_modules]:
            module = sys.modules[key]
            path = getattr(module, "__file__", None)
            if key.startswith("_hyport_port_") or (
                    path and any(Path(path).resolve().is_relative_to(r) for r in (run.src, run.dst))):
                del sys.modules[key]


def _reference(run: _Run, proof: PortProof) -> _Reference:
    """The original tree under the shim."""
    run.on_phase(IMPORT_ORIGINAL)
    original = port_model.load_tree(run.src, "original", run.only)
    run.on_phase(RUN_ORIGINAL)
    choice = port_model.pick_model(original)
    cls = getattr(next(m for m in original if m.__name__.endswith("." + choice.module)),
                  choice.class_name)
    base = port_model.read_config_json(run.src)
    kwargs = dict(run.overrides or {})
    try:
        kwargs = port_model.tiny_config_kwargs(cls.config_class, run.dtype, base, run.overrides)
        model = port_model.build(original, choice, copy.deepcopy(kwargs), run.dtype, run.device, run.seed)
    except Exception as exc:  # the model code's own: it said which field it missed
        raise _BuildFailure(kwargs) from exc
    proof.model_class, proof.model_kind, proof.config = choice.class_name, choice.kind, dict(kwargs)
    cases = port_model.batches(choice, model.config, run.device, run.seed)
    shim_api = getattr(sys.modules["flash_attn"], "__hyport_api__", None)
    proof.reference = "the original code, its flash path on hyport's flash_attn shim (SDPA)"
    calls: list[Optional[int]] = []
    try:
        expected = []
        for batch in cases:
            calls_before = shim_api.calls.total() if shim_api is not None else 0
            expected.append(_forward(model, batch))
            calls.append(shim_api.calls.total() - calls_before if shim_api is not None else None)
        if not any(calls):
            calls = [None] * len(cases)
            proof.reference = ("the original code's own non-flash path: its flash path did "
                               "not run on this host (no call reached the flash_attn shim)")
    except AssertionError as exc:
        where = _where(exc, run.roots)
        model = port_model.build(original, choice, copy.deepcopy(port_model.without_flash(kwargs)),
                                 run.dtype, run.device, run.seed)
        proof.reference = (f"the original code's own non-flash path: its flash path stops "
                           f"on this host at {where or 'an assert'}")
        expected = [_forward(model, batch) for batch in cases]
        calls = [None] * len(cases)
    greedy = [_greedy(model, batch.inputs["input_ids"][i:i + 1])
              for batch in cases[:1] if choice.kind == port_model.LM for i in range(2)]
    return _Reference(choice, kwargs, model, cases, expected, calls, greedy)


def _prove_port_side(run: _Run, proof: PortProof, ref: _Reference, expects_attention: bool) -> PortProof:
    run.on_phase(IMPORT_PORTED)
    try:
        ported = port_model.load_tree(run.dst, "ported", run.only)
    except ImportError as exc:
        left = " (an import the port left: flash_attn is not importable here)" \
            if "flash_attn" in str(exc) and GENERATED_MODULE not in str(exc) else ""
        raise _ProofFailure(f"the ported code does not import: {exc}{left}") from exc
    generated_by_path = port_model.generated_modules(run.dst, ported)
    run.on_phase(RUN_PORTED)
    generated = list(generated_by_path.values())
    if expects_attention and not generated:
        raise _ProofFailure(f"the ported tree has no {GENERATED_MODULE}.py next to the model")
    nfa, proof.ported_path, proof.emulated = _nfa_source(run.device)
    for module in generated:
        module.BACKEND = "npu"
        if nfa is not None:
            module.npu_fusion_attention = nfa

    def npu_calls() -> int:
        return sum(module.CALLS["npu"] for module in generated)

    dtype = run.dtype
    model = port_model.build(ported, ref.choice, copy.deepcopy(ref.kwargs), dtype, run.device, run.seed)
    model.load_state_dict(ref.model.state_dict())
    for batch, expected, want_calls in zip(ref.cases, ref.expected, ref.calls):
        before = npu_calls()
        try:
            out = _forward(model, batch)
        except Exception as exc:  # the case fails, the proof goes on to the next one
            proof.cases.append(ProofCase(batch.name, batch.kind, FAIL,
                                         detail=f"{type(exc).__name__}: {exc} "
                                                f"{_where(exc, run.roots)}".strip()))
            continue
        calls = npu_calls() - before
        outputs = compare(OUTPUTS, expected, out, proof.dtype, batch.valid)
        least_cosine = TOLERANCE[proof.dtype][COSINE]
        problems = []
        if not outputs.finite:
            problems.append("non-finite output (port or reference)")
        elif not outputs.max_abs <= outputs.bound:
            problems.append(f"max|diff| {outputs.max_abs:.3g} > {outputs.bound:.3g}")
        if outputs.finite and not outputs.cosine >= least_cosine:
            problems.append(f"cosine {outputs.cosine:.6f} < {least_cosine}")
        if expects_attention and calls == 0:
            problems.append("no NPU attention call: the forward never reached the port")
        elif want_calls is not None and calls != want_calls:
            problems.append(f"{calls} NPU attention call(s) where the original made {want_calls} "
                            "flash-attn call(s): part of the model bypasses the port")
        proof.cases.append(ProofCase(batch.name, batch.kind, FAIL if problems else PASS, outputs.max_abs,
                                     outputs.bound, outputs.cosine, calls, None, "; ".join(problems)))
    for where, module in generated_by_path.items():
        proof.cases.append(check_functions(module, FUNCTIONS + (f" of {where}" if len(generated) > 1 else "")))
    if ref.greedy:
        ids = ref.cases[0].inputs["input_ids"]
        for i, want in enumerate(ref.greedy):
            before = npu_calls()
            got = _greedy(model, ids[i:i + 1])
            calls = npu_calls() - before
            same = got == want
            reached = calls > 0 or not expects_attention
            proof.cases.append(ProofCase(
                f"greedy, prompt {i + 1}", "greedy", PASS if same and reached else FAIL,
                npu_calls=calls, tokens_match=same,
                detail="" if same else f"tokens {got} != reference {want}"))
    if not expects_attention:
        proof.notes.append("the code imports no flash-attn: the model is compared, no NPU "
                           "attention call is expected")
    proof.verdict = PASS if proof.cases and all(c.verdict == PASS for c in proof.cases) else FAIL
    return proof


def _half_only(proof: PortProof) -> Optional[str]:
    """Why a float32 proof says nothing (flash kept to half precision), else None."""
    for case in proof.cases:
        if case.detail.startswith("AssertionError") and "dtype" in case.detail:
            return f"float32 stopped at {case.detail.split(' ', 1)[-1]}"
    model_cases = [c for c in proof.cases if c.kind not in ("grid", "greedy")]
    if model_cases and all("no NPU attention call" in c.detail for c in model_cases):
        return ("no NPU attention call in float32 (the code runs its flash-attn path in half "
                "precision only)")
    return None


def prove_port(src: str | Path, dst: str | Path, *, dtype: str = "auto", seed: int = 0,
               device: str = "auto", config_overrides: Optional[dict] = None,
               on_phase: Optional[Callable[[str], None]] = None,
               config_setting: str = "--proof-config") -> PortProof:
    """In this process, on ``device`` (``auto``: the NPU when there is one); ``dtype="auto"``:
    float32, then bfloat16 when the code keeps flash attention to half precision (the record
    says why). ``config_overrides``: config fields set last, for code that needs a field its
    config class does not default (a build that fails names ``config_setting``, what sets
    them, with the value to try); ``on_phase`` is told each step before it starts. WARN
    (with ``error``) when the tree holds no model class the proof can build."""
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: expected auto, {', '.join(DTYPES)}")
    backend = get_backend(device)
    torch_npu, _ = import_torch_npu()
    # The torch_npu test double answers like an NPU host but holds no device: CPU tensors.
    real_npu = backend.kind == "npu" and not getattr(torch_npu, "__hyport_double__", False)
    torch_device = backend.torch_device(0) if real_npu else torch.device("cpu")
    src, dst = Path(src).resolve(), Path(dst).resolve()
    run = _Run(src.parent if src.is_file() else src, dst, src.name if src.is_file() else None,
               DTYPES["float32" if dtype == "auto" else dtype], torch_device, seed, config_overrides,
               on_phase or (lambda phase: None), config_setting)
    try:
        proof = _prove_in(run)
        why = _half_only(proof) if dtype == "auto" else None
        if why:
            proof = _prove_in(replace(run, dtype=torch.bfloat16))
            proof.notes.append(f"{why}: proved in bfloat16")
    except port_model.NoModelClass as exc:  # nothing to build: no proof, which is not a failed one
        return PortProof(verdict=WARN, error=f"no proof: {exc}", device=str(torch_device))
    except _ProofFailure as exc:
        return PortProof(verdict=FAIL, error=str(exc), device=str(torch_device))
    except _BuildFailure as failure:
        cause, where = failure.__cause__, _where(failure.__cause__, run.roots)
        frame = _frame(cause, run.roots)
        fix = config_fix(cause, frame[3] if frame else "", failure.config)
        error = f"{type(cause).__name__}: {cause}" + (f" at {where}" if where else "")
        hint = build_failure(error, config_setting, fix, run.overrides or {})
        return PortProof(verdict=FAIL, error=hint, device=str(torch_device))
    except Exception as exc:  # the model code itself failed to build or run: a FAIL with why
        where = _where(exc, run.roots)
        return PortProof(verdict=FAIL, error=f"{type(exc).__name__}: {exc}"
                                               + (f" at {where}" if where else ""), device=str(torch_device))
    return proof


def prove_in_child(spec: dict) -> dict:
    """:func:`prove_port` in the child of :func:`hyport_lib.port.proof_run.prove_port_in_child`,
    each step written to the ``phase`` file before it starts."""
    sys.dont_write_bytecode = True  # -B says so already; it is what keeps SRC byte-identical
    proof = prove_port(spec["src"], spec["dst"], dtype=spec["dtype"], seed=int(spec["seed"]),
                       config_overrides=spec["config_overrides"] or None,
                       on_phase=lambda phase: atomic_write_text(spec["phase"], phase),
                       config_setting=spec["config_setting"])
    return proof.to_dict()


def check_functions(generated, name: str) -> ProofCase:
    """The generated module's functions against :class:`FlashAttnAPI` (SDPA), on the NPU path,
    in float32, on what a tiny model's forward may not reach (:data:`FUNCTIONS`)."""
    reference = FlashAttnAPI("sdpa")
    generator = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=generator)

    q, k, v = rand(2, 7, 4, 32), rand(2, 5, 2, 32), rand(2, 5, 2, 32)
    tq, tk, tv = rand(9, 4, 32), rand(12, 2, 32), rand(12, 2, 32)
    cu_q = torch.tensor([0, 4, 9], dtype=torch.int32)
    cu_k = torch.tensor([0, 7, 12], dtype=torch.int32)
    calls: list = []
    for causal, window in ((False, (-1, -1)), (True, (-1, -1)), (False, (3, 1)), (True, (2, -1))):
        calls.append(("flash_attn_func", (q, k, v), {"causal": causal, "window_size": window}))
        calls.append(("flash_attn_func", (k.repeat(1, 1, 2, 1), q, q), {"causal": causal,
                                                                         "window_size": window}))
        calls.append(("flash_attn_varlen_func", (tq, tk, tv, cu_q, cu_k, 5, 7),
                      {"causal": causal, "window_size": window}))
    calls.append(("flash_attn_varlen_func", (tq, tk, tv, cu_q, cu_k, 5, 7),
                  {"softmax_scale": 0.3, "causal": True}))
    calls.append(("flash_attn_unpadded_func", (tq, tk, tv, cu_q, cu_k, 5, 7, 0.0), {"causal": True}))
    worst, bound, before, problems = 0.0, 0.0, generated.CALLS["npu"], []
    problems += _dropout_problems(generated, q, k, v, tq, tk, tv, cu_q, cu_k)
    for function, args, kwargs in calls:
        try:
            out = getattr(generated, function)(*args, **kwargs)
        except Exception as exc:  # a broken mapping: the case fails, naming the call
            problems.append(f"{function}({kwargs}): {type(exc).__name__}: {exc}")
            continue
        outputs = compare(OUTPUTS, getattr(reference, function)(*args, **kwargs), out)
        worst, bound = max(worst, outputs.max_abs), max(bound, outputs.bound)
        if not outputs.finite or not outputs.max_abs <= outputs.bound:
            problems.append(f"{function}({kwargs}): max|diff| {outputs.max_abs:.3g} > {outputs.bound:.3g}")
    return ProofCase(name, "grid", FAIL if problems else PASS, worst, bound, None, generated.CALLS["npu"] - before,
                     None, "; ".join(problems[:3]))


def _dropout_problems(generated, q, k, v, tq, tk, tv, cu_q, cu_k) -> list[str]:
    """``dropout_p`` must reach the kernel as ``keep_prob = 1 - dropout_p`` (the output is
    random, the argument is not: it is recorded on its way to the kernel)."""
    previous = generated.npu_fusion_attention
    inner = previous if previous is not None else import_torch_npu()[0].npu_fusion_attention
    seen = []

    def recording(*args, **kwargs):
        seen.append(kwargs.get("keep_prob"))
        return inner(*args, **kwargs)

    generated.npu_fusion_attention = recording
    try:
        generated.flash_attn_func(q, k, v, dropout_p=0.25)
        generated.flash_attn_varlen_func(tq, tk, tv, cu_q, cu_k, 5, 7, dropout_p=0.25)
    except Exception as exc:  # a broken mapping: named in the grid's case
        return [f"dropout: {type(exc).__name__}: {exc}"]
    finally:
        generated.npu_fusion_attention = previous
    if seen != [0.75, 0.75]:
        return [f"dropout_p=0.25 reached the kernel as keep_prob={seen} (expected 0.75)"]
    return []
