"""Logits parity (:func:`logits_parity`): two folders that should hold the same model (the
last ``checkpoint-N/`` and the final folder of a run stopped at step N) on one prompt, in
one fresh process (:mod:`.runner`), float32 and eager attention on the CPU, where identical
weights give bit-identical logits. Trainer checkpoints often carry no tokenizer files
(``AutoTokenizer`` then blames sentencepiece), so the tokenizer comes from either folder.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from hyport_lib.checkpoint_files.findings import Finding
from hyport_lib.models.loading import dtype_kwarg
from hyport_lib.weights.names import model_class
from hyport_lib.weights.reload import TOKENIZER_FILES
from hyport_lib.weights.runner import ChildRun, run_task

PROMPT = "The quick brown fox jumps over the lazy dog. 1 2 3 4 5"
#: fp32 on the CPU is deterministic: same weights, same logits to the last bit.
ATOL = 1e-5


@dataclass
class ParityResult(ChildRun):
    """Max and mean ``|Δ logits|``, top-1 agreement and the largest per-position KL."""

    path: str
    other_path: str
    status: str  # ok | failed | timeout
    tokenizer_path: Optional[str] = None
    tokens: Optional[int] = None
    max_abs_diff: Optional[float] = None
    mean_abs_diff: Optional[float] = None
    top1_agreement: Optional[float] = None
    max_kl: Optional[float] = None
    identical: Optional[bool] = None

    @property
    def same_model(self) -> bool:
        return self.status == "ok" and self.max_abs_diff is not None and self.max_abs_diff <= ATOL \
            and self.top1_agreement == 1.0

    def to_dict(self) -> dict:
        return {**asdict(self), "same_model": self.same_model}


def tokenizer_folder(*folders: os.PathLike) -> Optional[Path]:
    """The first folder holding tokenizer files."""
    for folder in folders:
        if folder and any((Path(folder) / f).is_file() for f in TOKENIZER_FILES):
            return Path(folder)
    return None


def logits_parity(path: os.PathLike, other_path: os.PathLike, *, prompt: str = PROMPT,
                  trust_remote_code: bool = False, timeout_s: float = 600.0,
                  log_dir: Optional[os.PathLike] = None) -> ParityResult:
    """Compare the logits of two folders on ``prompt`` (see the module docstring)."""
    a, b = Path(path).expanduser().resolve(), Path(other_path).expanduser().resolve()
    for name, folder in (("weights path", a), ("checkpoint path", b)):
        if not folder.is_dir():
            raise FileNotFoundError(f"{name} {str(folder)!r}: not a folder")
    tok = tokenizer_folder(a, b)
    if tok is None:
        return ParityResult(str(a), str(b), "failed",
                            reason=f"neither {a} nor {b} holds tokenizer files")
    spec = {"path": str(a), "other_path": str(b), "tokenizer_path": str(tok), "prompt": prompt,
            "trust_remote_code": bool(trust_remote_code)}
    out = run_task("parity", spec, timeout_s=timeout_s, log_dir=log_dir, name="parity")
    result = ParityResult.from_outcome(out, str(a), str(b), out.status, tokenizer_path=str(tok), taken=(
        "tokens", "max_abs_diff", "mean_abs_diff", "top1_agreement", "max_kl", "identical"))
    if out.status == "ok":
        for key in ("max_abs_diff", "mean_abs_diff", "max_kl"):
            if getattr(result, key) is None:  # JSON carries NaN / Inf as null: NaN logits, say so
                setattr(result, key, float("nan"))
    return result


def parity_findings(result: ParityResult) -> list[Finding]:
    other = Path(result.other_path).name
    if result.status != "ok":
        return [Finding("compare_failed", other, f"logits parity could not run: {result.reason}",
                        severity="warning")]
    if result.same_model:
        return []
    return [Finding("logits_differ", other,
                    f"logits differ from {result.path}: max |Δ| {result.max_abs_diff:.3g}, top-1 "
                    f"agreement {result.top1_agreement:.3f}, max KL {result.max_kl:.3g} over "
                    f"{result.tokens} tokens")]


# --------------------------------------------------------------------------- child side
def parity_in_child(spec: dict) -> dict:
    """In the worker: both models' logits on the prompt, compared."""
    import torch
    from transformers import AutoConfig, AutoTokenizer

    common = {"local_files_only": True, "trust_remote_code": bool(spec.get("trust_remote_code"))}
    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer_path"], **common)
    enc = tokenizer(spec["prompt"], return_tensors="pt")
    logits = []
    for path in (spec["path"], spec["other_path"]):
        cls = model_class(AutoConfig.from_pretrained(path, **common),
                          trust_remote_code=common["trust_remote_code"])
        model = cls.from_pretrained(path, attn_implementation="eager",
                                    **{dtype_kwarg(): torch.float32}, **common).eval()
        with torch.inference_mode():
            out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], use_cache=False)
        logits.append(out.logits.float())
        del model
    la, lb = logits
    diff = (la - lb).abs()
    kl = torch.nn.functional.kl_div(lb.log_softmax(-1), la.log_softmax(-1), log_target=True,
                                    reduction="none").sum(-1)
    return {"tokens": int(enc["input_ids"].shape[1]), "max_abs_diff": float(diff.max()),
            "mean_abs_diff": float(diff.mean()),
            "top1_agreement": float((la.argmax(-1) == lb.argmax(-1)).float().mean()),
            "max_kl": float(kl.max()), "identical": bool(torch.equal(la, lb))}
