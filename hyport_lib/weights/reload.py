"""The checks that load the folder with transformers (the seed's reload, the logits parity),
each in a fresh interpreter (:func:`run_task`, shared with :mod:`.zero`): loading a model in
the verifying process would prove little (modules already imported) and could take the
notebook's kernel down. A child has its own process group, its configuration on a stdin
lifeline and its log scrubbed, and is killed as a group past its timeout
(:mod:`hyport_lib.processes`). A *missing* key loads without any error and leaves that
weight random, so missing keys are findings; the parity runs float32, eager, on the CPU,
where identical weights give bit-identical logits (docs/weights.md, "Reload", "Comparisons").
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.backend import detect_kind
from hyport_lib.checkpoint_files.findings import Finding, name_some
from hyport_lib.models.loading import dtype_kwarg
from hyport_lib.processes import (Child, describe_exit, last_exception, read_log_tail, read_task_result, run_child,
                                  task_command, task_environ)
from hyport_lib.proof.tolerance import LOGITS, SAME_WEIGHTS, TOLERANCE, TOP1, compare
from hyport_lib.results import fresh_folder_beside_results
from hyport_lib.weights.names import model_class
from hyport_lib.utils.wording import counted, plural

KILL_GRACE_S = 2.0
POLL_S = 0.05
#: task -> the function its child runs (``module:function``, imported only there).
TASK_FUNCTIONS = {
    "reload": "hyport_lib.weights.reload_child:reload_in_child",
    "parity": "hyport_lib.weights.reload:parity_in_child",
    "zero": "hyport_lib.weights.zero:consolidate_in_child",
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
PROMPT = "The quick brown fox jumps over the lazy dog. 1 2 3 4 5"


# --------------------------------------------------------------------------- the children
@dataclass
class ChildOutcome:
    """How one child task ended: ``status`` ``ok`` (its result says so), ``failed`` or
    ``timeout``; ``result`` what it wrote (scrubbed, empty when nothing); ``reason`` one
    line when not ok."""

    status: str
    result: dict
    reason: Optional[str]
    log_path: str
    log_tail: str
    wall_s: float


@dataclass(kw_only=True)
class ChildRun:
    """What each task's result keeps of its child: why it did not succeed, its log, its time."""

    reason: Optional[str] = None
    log_path: Optional[str] = None
    log_tail: str = ""
    wall_s: Optional[float] = None

    @classmethod
    def from_outcome(cls, out: ChildOutcome, *args, taken: tuple[str, ...] = (), **kwargs):
        """``cls(*args, **kwargs)`` with the child's reason, log and time, and the ``taken``
        fields of its result when it succeeded (a field it left out keeps ``kwargs``')."""
        if out.status == "ok":
            kwargs.update({key: out.result[key] for key in taken if key in out.result})
        return cls(*args, reason=out.reason, log_path=out.log_path, log_tail=out.log_tail,
                   wall_s=out.wall_s, **kwargs)


def default_log_dir() -> Path:
    """A fresh folder beside the results: ``<results>/../weights_logs/<stamp>-<pid>``."""
    return fresh_folder_beside_results("weights_logs")


def child_env(task: str) -> dict[str, str]:
    extra = {"TOKENIZERS_PARALLELISM": "false"}
    if task == "zero" and detect_kind() == "cpu" and "DS_ACCELERATOR" not in os.environ:
        # DeepSpeed otherwise probes for an accelerator it does not find and warns; the
        # consolidation itself only needs the CPU.
        extra["DS_ACCELERATOR"] = "cpu"
    return task_environ(extra)


def run_task(task: str, spec: dict, *, timeout_s: float, log_dir: Optional[os.PathLike] = None,
             name: Optional[str] = None) -> ChildOutcome:
    """``spec`` goes on stdin, never to a file; ``<name>.log`` and ``<name>.json`` go to
    ``log_dir`` (default :func:`default_log_dir`)."""
    log_dir = Path(log_dir) if log_dir else default_log_dir()
    log_dir.mkdir(parents=True, exist_ok=True)
    name = name or task
    log_path, result_path = log_dir / f"{name}.log", log_dir / f"{name}.json"
    result_path.unlink(missing_ok=True)  # never read an earlier run's result
    cmd, payload = task_command(TASK_FUNCTIONS[task], spec, result_path, label=f"[hyport weights] {task}")
    ended = run_child(cmd, env=child_env(task), log_path=log_path, payload=payload,
                      timeout_s=float(timeout_s), name=name, poll_interval_s=POLL_S,
                      kill_grace_s=KILL_GRACE_S)
    return _outcome(log_path, result_path, ended.code, ended.timed_out, float(timeout_s),
                    time.monotonic() - ended.child.started, ended.child)


def _outcome(log_path: Path, result_path: Path, code: Optional[int], timed_out: bool, timeout_s: float,
             wall_s: float, child: Optional[Child] = None) -> ChildOutcome:
    """``child``: the one that ended, whose memory evidence a SIGKILL is judged by."""
    # The child scrubbed what it wrote (its environment holds this one's secrets: child_env).
    result = read_task_result(result_path)
    tail = read_log_tail(log_path, 12)
    if timed_out:
        status, reason = "timeout", f"no result after {timeout_s:g}s: the process group was killed"
    elif result.get("status") == "ok":
        status, reason = "ok", None
    elif result.get("status") == "failed":
        status, reason = "failed", f"{result.get('error_type', 'Error')}: {result.get('error', '')}"
    else:
        line = last_exception(tail)
        status = "failed"
        reason = f"ended without a result ({describe_exit(code, child)})" + (f"; {line}" if line else "")
    reason = reason.splitlines()[0] if reason else None
    return ChildOutcome(status, result, reason, str(log_path), tail, round(wall_s, 3))


# --------------------------------------------------------------------------- the reload
@dataclass
class ReloadResult(ChildRun):
    """``status``: LOAD_OK, failed or timeout."""

    path: str
    status: str
    dtype: str
    attn_implementation: str
    trust_remote_code: bool
    local_files_only: bool = True
    model_type: Optional[str] = None
    model_class: Optional[str] = None
    parameters: Optional[int] = None
    loaded_dtype: Optional[str] = None
    load_s: Optional[float] = None
    peak_rss_bytes: Optional[int] = None
    missing_keys: list[str] = field(default_factory=list)
    unexpected_keys: list[str] = field(default_factory=list)
    mismatched_keys: list[str] = field(default_factory=list)
    processor: Optional[str] = None
    processor_error: Optional[str] = None
    #: how the class was chosen when architectures names none this transformers has
    class_fallback: Optional[str] = None

    @property
    def load_ok(self) -> bool:
        return self.status == "LOAD_OK"

    @property
    def line(self) -> str:
        """The seed's line: ``LOAD_OK llava 210752``, or why not."""
        if self.load_ok:
            return f"LOAD_OK {self.model_type} {self.parameters}"
        return f"{self.status.upper()}: {self.reason}"

    def to_dict(self) -> dict:
        return {**asdict(self), "load_ok": self.load_ok, "line": self.line}


def reload(path: os.PathLike, *, dtype: str = "bfloat16", attn_implementation: str = "eager",
           trust_remote_code: bool = False, timeout_s: float = 600.0,
           log_dir: Optional[os.PathLike] = None) -> ReloadResult:
    """Never raises for the model's sake; FileNotFoundError when ``path`` is not a folder."""
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise FileNotFoundError(f"reload path {str(path)!r}: not a folder (from_pretrained needs one)")
    spec = {"path": str(folder), "dtype": dtype, "attn_implementation": attn_implementation,
            "trust_remote_code": bool(trust_remote_code)}
    out = run_task("reload", spec, timeout_s=timeout_s, log_dir=log_dir, name="reload")
    return ReloadResult.from_outcome(
        out, str(folder), "LOAD_OK" if out.status == "ok" else out.status, dtype, attn_implementation,
        bool(trust_remote_code), peak_rss_bytes=out.result.get("peak_rss_bytes"), taken=(
            "model_type", "model_class", "parameters", "loaded_dtype", "load_s", "missing_keys",
            "unexpected_keys", "mismatched_keys", "processor", "processor_error", "class_fallback"))


def reload_findings(result: ReloadResult) -> list[Finding]:
    here = Path(result.path).name
    out = []
    if not result.load_ok:
        out.append(Finding("reload_failed", here, f"from_pretrained in a fresh process: {result.reason}"))
        return out
    for cls, keys, why in (
            ("reload_missing_keys", result.missing_keys,
             lambda n: f"{plural('is', n, 'are')} missing: the model initialised {plural('it', n, 'them')} randomly"),
            ("reload_mismatched_keys", result.mismatched_keys,
             lambda n: f"{plural('has', n, 'have')} another shape than the model expects"),
            ("reload_unexpected_keys", result.unexpected_keys,
             lambda n: f"{plural('is', n, 'are')} not used by the model")):
        if keys:
            out.append(Finding(cls, here, f"{counted(len(keys), 'weight')} {why(len(keys))}: {name_some(keys)}",
                               tensors=keys))
    if result.class_fallback:
        out.append(Finding("reload_class_fallback", here, result.class_fallback))
    if result.processor_error:
        out.append(Finding("processor_failed", here, f"the processor/tokenizer files do not load: "
                                                     f"{result.processor_error}"))
    return out


# --------------------------------------------------------------------------- the logits parity
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
        bounds = TOLERANCE["float32"]
        figures = (self.max_abs_diff, self.top1_agreement)  # None: read back from a null (NaN logits)
        return self.status == "ok" and None not in figures and self.max_abs_diff <= bounds[SAME_WEIGHTS] \
            and self.top1_agreement >= bounds[TOP1]

    def to_dict(self) -> dict:
        return {**asdict(self), "same_model": self.same_model}


def logits_parity(path: os.PathLike, other_path: os.PathLike, *, prompt: str = PROMPT,
                  trust_remote_code: bool = False, timeout_s: float = 600.0,
                  log_dir: Optional[os.PathLike] = None) -> ParityResult:
    a, b = Path(path).expanduser().resolve(), Path(other_path).expanduser().resolve()
    for name, folder in (("weights path", a), ("checkpoint path", b)):
        if not folder.is_dir():
            raise FileNotFoundError(f"{name} {str(folder)!r}: not a folder")
    tok = next((f for f in (a, b) if any((f / name).is_file() for name in TOKENIZER_FILES)), None)
    if tok is None:
        return ParityResult(str(a), str(b), "failed",
                            reason=f"neither {a} nor {b} holds tokenizer files")
    spec = {"path": str(a), "other_path": str(b), "tokenizer_path": str(tok), "prompt": prompt,
            "trust_remote_code": bool(trust_remote_code)}
    out = run_task("parity", spec, timeout_s=timeout_s, log_dir=log_dir, name="parity")
    result = ParityResult.from_outcome(out, str(a), str(b), out.status, tokenizer_path=str(tok), taken=(
        "tokens", "max_abs_diff", "mean_abs_diff", "top1_agreement", "max_kl", "identical"))
    if out.status == "ok":
        for key in ("max_abs_diff", "mean_abs_diff", "top1_agreement", "max_kl"):
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


def parity_in_child(spec: dict) -> dict:
    """Both models' logits on the prompt, compared by the proofs' :func:`compare`: a NaN or
    an Inf on either side makes ``max_abs_diff`` infinite and the top-1 agreement unknown."""
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
    judged = compare(LOGITS, la, lb)
    kl = torch.nn.functional.kl_div(lb.log_softmax(-1), la.log_softmax(-1), log_target=True,
                                    reduction="none").sum(-1)
    return {"tokens": int(enc["input_ids"].shape[1]), "max_abs_diff": judged.max_abs,
            "mean_abs_diff": float((la - lb).abs().mean()), "top1_agreement": judged.top1,
            "max_kl": float(kl.max()), "identical": bool(torch.equal(la, lb))}
