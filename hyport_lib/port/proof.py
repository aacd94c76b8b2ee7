"""The proof of a port: the original code and the ported code, same tiny model, same inputs.

* **Reference**: the original tree imported with hyport's ``flash_attn`` shim on SDPA
  (flash-attn's semantics). Where the original's flash path cannot run on this host (an
  ``assert q.is_cuda`` on a CPU, say) the reference is the original's own non-flash
  path, and the record says so.
* **Port**: the ported tree imported *without* any ``flash_attn`` (the import fails if
  the port left one), its generated module forced onto the NPU path:
  ``torch_npu.npu_fusion_attention`` on an NPU; elsewhere the same call, served by
  hyport's CPU emulation of the documented contract (labelled so).
* **Cases**: a dense and a padded batch for a causal LM (plus greedy tokens), one image
  and two images packed for a NaViT-style vision tower, an image batch for a vision model.
* **Verdict** per case: outputs finite and within the tolerance of the dtype, cosine
  similarity above the floor, greedy tokens identical, and at least one NPU attention
  call per forward (a port whose attention never runs proves nothing: FAIL).

``dtype="auto"`` proves in float32 and, when the model's code keeps flash attention to
half precision (a dtype assert, or no call reached in float32), in bfloat16; the record
names the reason.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import importlib
import importlib.abc
import json
import sys
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import torch

from hyport_lib.backend import get_backend, import_torch_npu
from hyport_lib.npu_attention import emulation
from hyport_lib.npu_attention.flash_api import FlashAttnAPI
from hyport_lib.npu_attention.shim import (DEFAULT_VERSION, current_shim,
                                           install_flash_attn_shim, uninstall_flash_attn_shim)
from hyport_lib.port import tiny
from hyport_lib.port.codemod import GENERATED_MODULE

#: max|port - reference| <= TOLERANCE[dtype] * max(1, max|reference|), and cosine above.
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}
COSINE_MIN = {torch.float32: 0.99999, torch.bfloat16: 0.999, torch.float16: 0.9999}
GREEDY_STEPS = 4
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class ProofCase:
    """One input case of the proof."""

    name: str
    kind: str
    verdict: str
    max_abs: Optional[float] = None
    bound: Optional[float] = None
    cosine: Optional[float] = None
    npu_calls: int = 0
    tokens_match: Optional[bool] = None
    detail: str = ""


@dataclass
class PortProof:
    """The proof's record (a stage-02 record in the report)."""

    verdict: str
    model_class: str = ""
    model_kind: str = ""
    config: dict = field(default_factory=dict)
    dtype: str = ""
    device: str = ""
    reference: str = ""
    ported_path: str = ""
    emulated: bool = False
    cases: list[ProofCase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def frame(self):
        import pandas as pd

        return pd.DataFrame([asdict(c) for c in self.cases])


class _ProofFailure(Exception):
    """A step of the proof that ends it with a FAIL and a reason."""


def _where(exc: BaseException, roots: dict[str, Path]) -> str:
    """``<tree> file:line `code``` of the innermost frame inside the model trees."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename)
        for label, root in roots.items():
            if root in path.parents:
                return (f"{label} {path.relative_to(root)}:{frame.lineno} "
                        f"`{(frame.line or '').strip()}`")
    return ""


def _nfa_source(device: torch.device) -> tuple[Optional[object], str, bool]:
    """(callable to set on the generated module or None for its own torch_npu import,
    description, emulated)."""
    torch_npu, _ = import_torch_npu()
    if torch_npu is not None and device.type == "npu":
        return None, f"torch_npu.npu_fusion_attention on {device}", False
    if torch_npu is not None and getattr(torch_npu, "__hyport_double__", False):
        return None, ("torch_npu.npu_fusion_attention of the torch_npu test double: hyport's CPU "
                      "emulation of the documented contract (emulated, not an NPU result)"), True
    return emulation.npu_fusion_attention, ("hyport's CPU emulation of "
                                            "torch_npu.npu_fusion_attention (emulated, not an NPU "
                                            "result)"), True


def _compare(ref: torch.Tensor, out: torch.Tensor, dtype, valid=None) -> tuple[float, float, float, bool]:
    ref64, out64 = ref.double(), out.double()
    if valid is not None:
        ref64, out64 = ref64[valid.to(ref.device)], out64[valid.to(ref.device)]
    # both sides: a NaN in the reference would make every comparison below false
    finite = bool(torch.isfinite(out64).all()) and bool(torch.isfinite(ref64).all())
    max_abs = float((out64 - ref64).abs().max()) if finite else float("inf")
    bound = TOLERANCE[dtype] * max(1.0, float(ref64.abs().max()))
    cosine = float(torch.nn.functional.cosine_similarity(ref64.flatten(), out64.flatten(), dim=0)) \
        if finite else float("nan")
    return max_abs, bound, cosine, finite


def _greedy(model, ids: torch.Tensor) -> list[int]:
    tokens = ids
    with torch.no_grad():
        for _ in range(GREEDY_STEPS):
            logits = tiny.first_tensor(model(input_ids=tokens, use_cache=False))
            tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], dim=1)
    return tokens[0, ids.shape[1]:].tolist()


def _build_reference(src: Path, only, choice_kwargs, dtype, device, seed, overrides):
    """The original tree under the shim: (modules, choice, model)."""
    modules = tiny.load_tree(src, "original", only)
    choice = tiny.pick_model(modules)
    cls = getattr(next(m for m in modules if m.__name__.endswith("." + choice.module)),
                  choice.class_name)
    kwargs = tiny.tiny_config_kwargs(cls.config_class, dtype, tiny.read_config_json(src), overrides)
    choice_kwargs.update(kwargs)
    model = tiny.build(modules, choice, copy.deepcopy(kwargs), dtype, device, seed)
    return modules, choice, model


def _run(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return tiny.first_tensor(model(**batch.inputs, **({"use_cache": False}
                                                           if batch.kind in ("dense", "padded") else {})))


class _NoFlashAttn(importlib.abc.MetaPathFinder):
    """Refuses ``import flash_attn`` (and its submodules) while the port loads and runs, so
    that on a host where flash-attn is installed an import the port left still fails."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "flash_attn" or fullname.startswith("flash_attn."):
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden from the port "
                                      "by the proof)", name=fullname)
        return None


@contextlib.contextmanager
def _without_flash_attn():
    hidden = {k: sys.modules.pop(k) for k in list(sys.modules)
              if k == "flash_attn" or k.startswith("flash_attn.")}
    blocker = _NoFlashAttn()
    sys.meta_path.insert(0, blocker)
    try:
        yield
    finally:
        sys.meta_path.remove(blocker)
        for key in [k for k in sys.modules if k == "flash_attn" or k.startswith("flash_attn.")]:
            del sys.modules[key]
        sys.modules.update(hidden)


def _import_styles(folder: Path) -> set[str]:
    """How the files of ``folder`` import the generated module: ``relative``, ``plain``."""
    styles = set()
    for path in folder.glob("*.py"):
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and (
                    node.module == GENERATED_MODULE or (node.module is None and any(
                        a.name == GENERATED_MODULE for a in node.names))):
                styles.add("relative")
            elif (isinstance(node, ast.ImportFrom) and node.level == 0
                  and node.module == GENERATED_MODULE) or (isinstance(node, ast.Import) and any(
                      a.name == GENERATED_MODULE for a in node.names)):
                styles.add("plain")
    return styles


def _generated_modules(dst: Path, ported) -> dict[str, object]:
    """Every copy of the generated module in the ported tree (by its path in the tree),
    imported now under the name the code imports it by (relatively in its package, or
    plainly from the tree's root), so that a copy the code imports only inside a function
    is configured too."""
    package = ported[0].__name__.rpartition(".")[0] if ported else None
    found = {}
    for path in sorted(dst.rglob(f"{GENERATED_MODULE}.py")):
        relative = path.relative_to(dst).with_suffix("").parts
        styles = _import_styles(path.parent)
        names = [".".join((package, *relative))] if package and "relative" in styles else []
        if len(relative) == 1 and "plain" in styles:
            names.append(GENERATED_MODULE)
        sys.path.insert(0, str(dst))
        try:
            for name in names:
                where = path.relative_to(dst).as_posix()
                if len(names) > 1:  # imported both ways: two module objects, both checked
                    where += f" (imported as {name})"
                found[where] = importlib.import_module(name)
        finally:
            sys.path.remove(str(dst))
    return found


def _expects_attention(dst: Path) -> bool:
    """Whether the port rewrote flash-attn code (else there is no attention to count)."""
    record = dst / "port.json"
    if not record.is_file():
        return True
    try:
        changes = json.loads(record.read_text(encoding="utf-8")).get("changes") or []
    except ValueError:
        return True
    return any(c.get("kind") == "flash_attn_import" for c in changes if isinstance(c, dict))


def _prove_in(src: Path, dst: Path, dtype, device, seed, overrides) -> PortProof:
    """One proof in one dtype. Whatever it loads is forgotten after, and a flash_attn shim
    the caller had installed is put back."""
    before_modules = set(sys.modules)
    before_shim = current_shim()
    try:
        return _prove_loaded(src, dst, dtype, device, seed, overrides)
    finally:
        uninstall_flash_attn_shim()
        if before_shim is not None and before_shim.installed:
            install_flash_attn_shim(before_shim.backend, version=before_shim.version,
                                    force=bool(before_shim._replaced))
        roots = (src.parent if src.is_file() else src, dst)
        for key in [k for k in sys.modules if k not in before_modules]:
            module = sys.modules[key]
            path = getattr(module, "__file__", None)
            if key.startswith("_hyport_port_") or (
                    path and any(Path(path).resolve().is_relative_to(r) for r in roots)):
                del sys.modules[key]


def _prove_loaded(src: Path, dst: Path, dtype, device, seed, overrides) -> PortProof:
    only = src.name if src.is_file() else None  # one file ported: that file, in both trees
    src = src.parent if src.is_file() else src
    roots = {"original": src, "port": dst}
    proof = PortProof(verdict="FAIL", dtype=str(dtype).replace("torch.", ""), device=str(device))
    expects_attention = _expects_attention(dst)
    # The flash-attn API the code was written against: unpad_input's 4 or 5 values.
    generated_text = next((p.read_text(encoding="utf-8") for p in dst.rglob(f"{GENERATED_MODULE}.py")), "")
    version = "2.6.3" if "UNPAD_INPUT_RETURNS = 4\n" in generated_text else DEFAULT_VERSION
    shim = install_flash_attn_shim("sdpa", force=True, version=version)
    if not shim.installed:
        raise _ProofFailure(f"the flash_attn shim could not be installed: {shim.reason}")
    kwargs: dict = {}
    original, choice, reference = _build_reference(src, only, kwargs, dtype, device, seed, overrides)
    proof.model_class, proof.model_kind, proof.config = choice.class_name, choice.kind, dict(kwargs)
    cases = tiny.batches(choice, reference.config, device, seed)
    shim_api = getattr(sys.modules["flash_attn"], "__hyport_api__", None)
    proof.reference = "the original code, its flash path on hyport's flash_attn shim (SDPA)"
    reference_calls: list[Optional[int]] = []
    try:
        expected = []
        for batch in cases:
            calls_before = shim_api.calls if shim_api is not None else 0
            expected.append(_run(reference, batch))
            reference_calls.append(shim_api.calls - calls_before if shim_api is not None else None)
        if not any(reference_calls):
            reference_calls = [None] * len(cases)
            proof.reference = ("the original code's own non-flash path: its flash path did "
                               "not run on this host (no call reached the flash_attn shim)")
    except AssertionError as exc:
        where = _where(exc, roots)
        reference = tiny.build(original, choice, copy.deepcopy(tiny.without_flash(kwargs)),
                               dtype, device, seed)
        proof.reference = (f"the original code's own non-flash path: its flash path stops "
                           f"on this host at {where or 'an assert'}")
        expected = [_run(reference, batch) for batch in cases]
        reference_calls = [None] * len(cases)
    greedy_ref = [_greedy(reference, batch.inputs["input_ids"][i:i + 1])
                  for batch in cases[:1] if choice.kind == tiny.LM for i in range(2)]
    uninstall_flash_attn_shim()
    with _without_flash_attn():
        return _prove_port_side(proof, dst, only, roots, choice, kwargs, reference, cases, expected,
                                reference_calls, greedy_ref, expects_attention, dtype, device, seed)


def _prove_port_side(proof, dst, only, roots, choice, kwargs, reference, cases, expected,
                     reference_calls, greedy_ref, expects_attention, dtype, device, seed) -> PortProof:
    """The ported tree's half of the proof, run with flash_attn unimportable."""
    try:
        ported = tiny.load_tree(dst, "ported", only)
    except ImportError as exc:
        left = " (an import the port left: flash_attn is not importable here)" \
            if "flash_attn" in str(exc) and GENERATED_MODULE not in str(exc) else ""
        raise _ProofFailure(f"the ported code does not import: {exc}{left}") from exc
    generated_by_path = _generated_modules(dst, ported)
    generated = list(generated_by_path.values())
    if expects_attention and not generated:
        raise _ProofFailure(f"the ported tree has no {GENERATED_MODULE}.py next to the model")
    nfa, proof.ported_path, proof.emulated = _nfa_source(device)
    for module in generated:
        module.BACKEND = "npu"
        if nfa is not None:
            module.npu_fusion_attention = nfa

    def npu_calls() -> int:
        return sum(module.CALLS["npu"] for module in generated)

    model = tiny.build(ported, choice, copy.deepcopy(kwargs), dtype, device, seed)
    model.load_state_dict(reference.state_dict())
    for batch, ref, want_calls in zip(cases, expected, reference_calls):
        before = npu_calls()
        try:
            out = _run(model, batch)
        except Exception as exc:  # the case fails, the proof goes on to the next one
            proof.cases.append(ProofCase(batch.name, batch.kind, "FAIL",
                                         detail=f"{type(exc).__name__}: {exc} "
                                                f"{_where(exc, roots)}".strip()))
            continue
        calls = npu_calls() - before
        max_abs, bound, cosine, finite = _compare(ref, out, dtype, batch.valid)
        problems = []
        if not finite:
            problems.append("non-finite output (port or reference)")
        elif not max_abs <= bound:
            problems.append(f"max|diff| {max_abs:.3g} > {bound:.3g}")
        if finite and not cosine >= COSINE_MIN[dtype]:
            problems.append(f"cosine {cosine:.6f} < {COSINE_MIN[dtype]}")
        if expects_attention and calls == 0:
            problems.append("no NPU attention call: the forward never reached the port")
        elif want_calls is not None and calls != want_calls:
            problems.append(f"{calls} NPU attention call(s) where the original made {want_calls} "
                            "flash-attn call(s): part of the model bypasses the port")
        proof.cases.append(ProofCase(batch.name, batch.kind, "FAIL" if problems else "PASS",
                                     max_abs, bound, cosine, calls, None, "; ".join(problems)))
    for where, module in generated_by_path.items():
        proof.cases.append(_attention_grid(module, len(generated) > 1 and where))
    if greedy_ref:
        ids = cases[0].inputs["input_ids"]
        for i, want in enumerate(greedy_ref):
            before = npu_calls()
            got = _greedy(model, ids[i:i + 1])
            calls = npu_calls() - before
            same = got == want
            reached = calls > 0 or not expects_attention
            proof.cases.append(ProofCase(
                f"greedy, prompt {i + 1}", "greedy", "PASS" if same and reached else "FAIL",
                npu_calls=calls, tokens_match=same,
                detail="" if same else f"tokens {got} != reference {want}"))
    if not expects_attention:
        proof.notes.append("the code imports no flash-attn: the model is compared, no NPU "
                           "attention call is expected")
    proof.verdict = "PASS" if proof.cases and all(c.verdict == "PASS" for c in proof.cases) else "FAIL"
    return proof


def _attention_grid(generated, label=None) -> ProofCase:
    """The generated module's functions on their own, on the NPU path, against hyport's
    reference semantics of flash-attn, over what a tiny model's forward may not reach:
    GQA, causal with fewer and with more queries than keys (blind rows), windows, varlen
    with different query and key lengths, flash-attn 1.x's top-left causal. float32."""
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
    for name, args, kwargs in calls:
        try:
            out = getattr(generated, name)(*args, **kwargs)
        except Exception as exc:  # a broken mapping: the case fails, naming the call
            problems.append(f"{name}({kwargs}): {type(exc).__name__}: {exc}")
            continue
        want = getattr(reference, name)(*args, **kwargs)
        max_abs, limit, _, finite = _compare(want, out, torch.float32)
        worst, bound = max(worst, max_abs), max(bound, limit)
        if not finite or not max_abs <= limit:
            problems.append(f"{name}({kwargs}): max|diff| {max_abs:.3g} > {limit:.3g}")
    name = "attention functions (GQA, windows, Sq != Sk, varlen, 1.x causal, dropout)"
    return ProofCase(name + (f" of {label}" if label else ""), "grid",
                     "FAIL" if problems else "PASS", worst, bound, None,
                     generated.CALLS["npu"] - before, None, "; ".join(problems[:3]))


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
               device: str = "auto", config_overrides: Optional[dict] = None) -> PortProof:
    """Prove the port of ``src`` in ``dst`` (see the module docstring).

    Args:
        src: the original tree.
        dst: the ported tree (``hyport port``'s output).
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16``.
        seed: seeds the weights and the inputs.
        device: where the models run: ``auto`` (the NPU when there is one, else the CPU).
        config_overrides: config fields set last (``{"rope_scaling": {...}}``), for code
            that needs a field its config class does not default.

    Returns:
        A :class:`PortProof`: PASS or FAIL; WARN when the tree holds no model class the
        proof can build (``error`` says so). ``error`` says why no proof was made.
    """
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: expected auto, {', '.join(DTYPES)}")
    backend = get_backend(device)
    torch_npu, _ = import_torch_npu()
    # The torch_npu test double answers like an NPU host but holds no device: CPU tensors.
    real_npu = backend.kind == "npu" and not getattr(torch_npu, "__hyport_double__", False)
    torch_device = backend.torch_device(0) if real_npu else torch.device("cpu")
    src, dst = Path(src).resolve(), Path(dst).resolve()
    try:
        first = DTYPES["float32" if dtype == "auto" else dtype]
        proof = _prove_in(src, dst, first, torch_device, seed, config_overrides)
        why = _half_only(proof) if dtype == "auto" else None
        if why:
            proof = _prove_in(src, dst, torch.bfloat16, torch_device, seed, config_overrides)
            proof.notes.append(f"{why}: proved in bfloat16")
    except tiny.NoModelClass as exc:  # nothing to build: no proof, which is not a failed one
        return PortProof(verdict="WARN", error=f"no proof: {exc}", device=str(torch_device),
                         emulated=False)
    except _ProofFailure as exc:
        return PortProof(verdict="FAIL", error=str(exc), device=str(torch_device), emulated=False)
    except Exception as exc:  # the model code itself failed to build or run: a FAIL with why
        where = _where(exc, {"original": src.parent if src.is_file() else src, "port": dst})
        return PortProof(verdict="FAIL", error=f"{type(exc).__name__}: {exc}"
                                               + (f" at {where}" if where else ""),
                         device=str(torch_device), emulated=False)
    return proof
