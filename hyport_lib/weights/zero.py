"""DeepSpeed ZeRO states in a Trainer checkpoint: listed (:func:`list_zero`), read as little
as possible, and consolidated (:func:`consolidate`) in a fresh child to be compared with the
exported weights: ``max |fp32 cast to the saved dtype − saved|`` must be 0. The files and
what reads them: docs/weights.md, "DeepSpeed ZeRO checkpoints".
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.checkpoint_files.findings import Finding, name_some
from hyport_lib.results import CHECKPOINT_MARKER
from hyport_lib.weights.layout import inspect_checkpoint
from hyport_lib.weights.reload import ChildRun, run_task
from hyport_lib.utils.wording import counted, plural

_OPTIM_RE = re.compile(r"^(?:(?P<prec>bf16|fp16)_)?zero_pp_rank_(?P<rank>\d+)_mp_rank_(?P<mp>\d+)_optim_states\.pt$")
_MODEL_RE = re.compile(r"^(?:zero_pp_rank_(?P<rank>\d+)_)?mp_rank_(?P<mp>\d+)_model_states\.pt$")
_STEP_RE = re.compile(r"^global_step(\d+)$")
NODE_LOCAL = "node_local"
#: More ranks than any job has: a larger dp_world_size is a corrupt file, not a count.
_MAX_RANKS = 1 << 20


@dataclass
class ZeroFile:
    file: str
    kind: str  # model_states | optim_states
    rank: Optional[int]
    bytes: int


@dataclass
class ZeroListing:
    """The ZeRO states of one checkpoint (``dp_world_size`` and the rest as the model-states
    file records them)."""

    checkpoint: str
    tag: Optional[str] = None  # global_stepN: from ``latest``, else the highest present
    files: list[ZeroFile] = field(default_factory=list)  # model states first
    #: The ranks that make it whole: ``dp_world_size``, else hyport's marker's (None: neither).
    world_size: Optional[int] = None
    ranks: list[int] = field(default_factory=list)  # those with an optimizer-state file
    dp_world_size: Optional[int] = None
    marker_world_size: Optional[int] = None  # hyport_checkpoint.json's
    storage: Optional[str] = None  # hyport_checkpoint.json's: shared | node_local
    marker_ranks: Optional[list[int]] = None  # hyport_checkpoint.json's: those this folder holds
    mp_world_size: Optional[int] = None
    zero_stage: Optional[int] = None
    ds_version: Optional[str] = None
    precision: Optional[str] = None
    parameters: Optional[int] = None  # of param_shapes: trainable, no weight read
    frozen_parameters: Optional[int] = None
    global_steps: Optional[int] = None
    error: Optional[str] = None  # why the model-states file could not be read

    @property
    def present(self) -> bool:
        return self.tag is not None


def find_tag(checkpoint: Path) -> Optional[str]:
    latest = checkpoint / "latest"
    if latest.is_file():
        tag = latest.read_text(encoding="utf-8", errors="replace").strip()
        if tag and (checkpoint / tag).is_dir():
            return tag
    steps = [(int(m.group(1)), p.name) for p in checkpoint.iterdir()
             if p.is_dir() and (m := _STEP_RE.match(p.name))]
    return max(steps)[1] if steps else None


def list_zero(checkpoint: os.PathLike) -> tuple[ZeroListing, list[Finding]]:
    """List a checkpoint's ZeRO states; findings for missing ranks or unreadable files. The
    ranks that make it whole come from what was recorded (DeepSpeed's ``dp_world_size``, else
    hyport's marker), never from the ranks present: missing high ranks leave no trace there."""
    folder = Path(checkpoint).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint path {str(checkpoint)!r}: not a folder")
    listing = ZeroListing(str(folder))
    tag = find_tag(folder)
    if tag is None:
        return listing, []
    listing.tag = tag
    states = folder / tag
    model_files = []
    for path in sorted(states.iterdir()):
        if m := _OPTIM_RE.match(path.name):
            listing.ranks.append(int(m.group("rank")))
            listing.precision = m.group("prec") or listing.precision
            listing.files.append(ZeroFile(path.name, "optim_states", int(m.group("rank")), path.stat().st_size))
        elif m := _MODEL_RE.match(path.name):
            rank = int(m.group("rank")) if m.group("rank") else None
            model_files.append((rank or 0, path))
            listing.files.append(ZeroFile(path.name, "model_states", rank, path.stat().st_size))
    listing.files.sort(key=lambda f: (f.kind != "model_states", f.rank or 0))
    listing.ranks.sort()
    findings: list[Finding] = []
    if model_files:
        _read_model_states(min(model_files)[1], listing)
    else:
        listing.error = "no *_model_states.pt file"
    if listing.error:
        findings.append(Finding("zero_unreadable", f"{tag}/", f"the model states could not be read: "
                                                             f"{listing.error}"))
    marker_said = _read_marker(folder, listing)
    if marker_said:
        findings.append(Finding("zero_unreadable", CHECKPOINT_MARKER, marker_said))
    whole = _whole(folder.name, tag, listing)
    if whole is not None:
        findings.append(whole)
    return listing, findings


def _read_marker(folder: Path, listing: ZeroListing) -> str:
    """Stage 04's marker: its world size, storage and the ranks this folder holds; what is
    wrong with it ("" : nothing, or no marker: not every checkpoint is hyport's)."""
    path = folder / CHECKPOINT_MARKER
    if not path.is_file():
        return ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"{CHECKPOINT_MARKER} is unreadable ({type(exc).__name__}): its world size and ranks are not used"
    if not isinstance(data, dict):
        return f"{CHECKPOINT_MARKER} holds a {type(data).__name__}, not an object: its world size and ranks are not used"
    world, ranks, storage = data.get("world_size"), data.get("ranks"), data.get("storage")
    if world is not None and not (isinstance(world, int) and 0 < world <= _MAX_RANKS):
        return f"{CHECKPOINT_MARKER}: world_size {world!r} is not a rank count"
    if ranks is not None and not (isinstance(ranks, list) and ranks
                                  and all(isinstance(r, int) and 0 <= r < (world or _MAX_RANKS) for r in ranks)):
        return f"{CHECKPOINT_MARKER}: ranks {str(ranks)[:80]} is not a list of ranks below world_size {world}"
    listing.marker_world_size = world
    listing.storage = storage if isinstance(storage, str) else None
    listing.marker_ranks = sorted(set(ranks)) if ranks is not None else None
    return ""


def _whole(name: str, tag: str, listing: ZeroListing) -> Optional[Finding]:
    """A ``zero_incomplete`` finding unless every rank of the recorded world has its states
    here (None: whole). A node-local folder holding exactly its node's ranks is a warning:
    that is how node-local storage leaves it, yet it is no checkpoint to consolidate."""
    recorded, marker = listing.dp_world_size, listing.marker_world_size
    model_states = next((f.file for f in listing.files if f.kind == "model_states"), "*_model_states.pt")
    if recorded is not None and marker is not None and recorded != marker:
        return Finding("zero_incomplete", f"{tag}/",
                       f"{tag}/ was written for dp_world_size {recorded} ({model_states}) but {CHECKPOINT_MARKER} "
                       f"says world_size {marker}: which ranks make it whole cannot be told")
    listing.world_size = recorded or marker
    present = listing.ranks
    if listing.world_size is None:
        return Finding("zero_incomplete", f"{tag}/",
                       f"{name}'s world size is recorded nowhere (no dp_world_size in {model_states}, no "
                       f"{CHECKPOINT_MARKER}): whether every rank's optimizer states are here cannot be told"
                       + (f" (present: {plural('rank', len(present))} {_span(present)})" if present else ""))
    world = listing.world_size
    beyond = [r for r in present if r >= world]
    if beyond:
        return Finding("zero_incomplete", f"{tag}/",
                       f"written for {counted(world, 'rank')} but optimizer states exist for "
                       f"{plural('rank', len(beyond))} {_span(beyond)} beyond them (an older save left in the folder?)")
    node_local = listing.storage == NODE_LOCAL and listing.marker_ranks is not None
    held = set(listing.marker_ranks) if node_local else set(range(world))
    missing = sorted(held - set(present))
    if missing:
        what = (f"{name} should hold the ZeRO states of ranks {_span(sorted(held))} of {world} (node-local storage)"
                if node_local and len(held) < world else f"written for {counted(world, 'rank')}")
        return Finding("zero_incomplete", f"{tag}/",
                       f"{what} but optimizer states exist for {plural('rank', len(present))} "
                       f"{_span(present) if present else 'none'}: missing {missing[:8]}"
                       f"{' and more' if len(missing) > 8 else ''} (a rank did not finish saving?)")
    if len(present) < world:  # node-local: every rank of this node here, the others' on their nodes
        return Finding("zero_incomplete", f"{tag}/",
                       f"{name} holds the ZeRO states of ranks {_span(present)} of {world} (node-local storage: "
                       f"the other nodes keep theirs)", severity="warning")
    return None


def _span(ranks: list[int]) -> str:
    """``0-3`` for consecutive ranks, else ``0, 2, 5`` (sorted, a few named)."""
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks[:8])) + (" and more" if len(ranks) > 8 else "")


def _read_model_states(path: Path, listing: ZeroListing) -> None:
    try:
        import torch

        states = torch.load(str(path), map_location="cpu", mmap=True, weights_only=True)
    except Exception as exc:  # a pickle torch refuses, a truncated zip: reported, not raised
        listing.error = f"{path.name}: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        return
    if not isinstance(states, dict):
        listing.error = f"{path.name}: holds a {type(states).__name__}, not DeepSpeed's dict of model states"
        return
    listing.dp_world_size = _int(states.get("dp_world_size"))
    if listing.dp_world_size is not None and not 0 < listing.dp_world_size <= _MAX_RANKS:
        listing.error = f"{path.name}: dp_world_size {listing.dp_world_size} is not a rank count"
        listing.dp_world_size = None
        return
    listing.mp_world_size = _int(states.get("mp_world_size"))
    listing.ds_version = states.get("ds_version") if isinstance(states.get("ds_version"), str) else None
    listing.global_steps = _int(states.get("global_steps"))
    config = states.get("ds_config")
    zero = config.get("zero_optimization") if isinstance(config, dict) else None
    listing.zero_stage = _int(zero.get("stage")) if isinstance(zero, dict) else None
    listing.parameters = _numel(states.get("param_shapes"))
    listing.frozen_parameters = _numel(states.get("frozen_param_shapes"))


def _int(value) -> Optional[int]:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def _numel(groups) -> Optional[int]:
    """Elements of ``param_shapes``: a list of name -> shape dicts (one per group), or one dict."""
    if groups is None:
        return None
    if isinstance(groups, dict):
        groups = [groups]
    total = 0
    try:
        for group in groups:
            for shape in dict(group).values():
                total += math.prod(int(d) for d in shape)
    except (TypeError, ValueError, OverflowError):  # not DeepSpeed's layout: no count, not a crash
        return None
    return total


#: PEFT's file of a LoRA checkpoint; its keys lack the adapter name DeepSpeed's carry
#: (``lora_A.weight`` on disk, ``lora_A.default.weight`` in the model).
ADAPTER_FILE = "adapter_model.safetensors"
ADAPTER_NAME = "default"


@dataclass
class ZeroComparison(ChildRun):
    """``targets``: one per folder compared: its ``folder``, ``role`` (``checkpoint``,
    ``adapter``: its LoRA file, or ``weights``: the folder verified), counts, worst
    differences and one row per tensor."""

    checkpoint: str
    status: str  # ok | failed | timeout
    tag: Optional[str] = None
    zero_tensors: Optional[int] = None
    zero_parameters: Optional[int] = None
    consolidate_s: Optional[float] = None
    deepspeed_says: list[str] = field(default_factory=list)
    targets: list[dict] = field(default_factory=list)
    peak_rss_bytes: Optional[int] = None


def consolidate(checkpoint: os.PathLike, targets: list[tuple[str, os.PathLike]], *,
                tag: Optional[str] = None, trust_remote_code: bool = False,
                timeout_s: float = 600.0, log_dir: Optional[os.PathLike] = None) -> ZeroComparison:
    folder = Path(checkpoint).expanduser().resolve()
    spec = {"checkpoint": str(folder), "tag": tag, "trust_remote_code": bool(trust_remote_code),
            "targets": [[role, str(Path(t).expanduser().resolve())] for role, t in targets]}
    out = run_task("zero", spec, timeout_s=timeout_s, log_dir=log_dir, name="zero_to_fp32")
    return ZeroComparison.from_outcome(
        out, str(folder), out.status, tag=tag, peak_rss_bytes=out.result.get("peak_rss_bytes"),
        taken=("tag", "zero_tensors", "zero_parameters", "consolidate_s", "deepspeed_says", "targets"))


def zero_findings(result: ZeroComparison) -> list[Finding]:
    here = Path(result.checkpoint).name
    if result.status != "ok":
        return [Finding("zero_failed", here, f"zero_to_fp32 in a fresh process: {result.reason}")]
    out = []
    for target in result.targets:
        own = target["role"] in ("checkpoint", "adapter")
        where = Path(target["folder"]).name
        if target["differing"]:
            note = "" if own else (" (expected only when training went on after this checkpoint)")
            out.append(Finding(
                "zero_mismatch", where,
                f"{target['differing']} of {counted(target['compared'], 'tensor')} of {where} differ from "
                f"{here}'s consolidated fp32 weights cast to their dtype (worst {target['max_abs_cast']:.3g}): "
                f"{name_some(target['differing_keys'])}{note}",
                tensors=target["differing_keys"], severity="" if own else "warning"))
        lonely = target["only_in_zero"] + target["only_in_file"]
        if lonely:
            out.append(Finding(
                "zero_keys_differ", where,
                f"{counted(len(target['only_in_zero']), 'tensor')} only in the ZeRO states, "
                f"{len(target['only_in_file'])} only in the files: {name_some(lonely)}",
                tensors=lonely, severity="" if own else "warning"))
    return out


# --------------------------------------------------------------------------- child side
def consolidate_in_child(spec: dict) -> dict:
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    started = time.perf_counter()
    said = io.StringIO()
    with contextlib.redirect_stdout(said):  # it prints its progress to stdout
        state = get_fp32_state_dict_from_zero_checkpoint(spec["checkpoint"], tag=spec.get("tag"),
                                                         lazy_mode=True)
    seconds = time.perf_counter() - started
    print(said.getvalue(), flush=True)
    targets = [_compare(role, folder, state, bool(spec.get("trust_remote_code")))
               for role, folder in spec["targets"]]
    return {"tag": spec.get("tag") or find_tag(Path(spec["checkpoint"])), "zero_tensors": len(state),
            "zero_parameters": int(sum(math.prod(t.shape) for t in state.values())),
            "consolidate_s": round(seconds, 3),
            "deepspeed_says": [s.strip() for s in said.getvalue().splitlines() if s.strip()][:6],
            "targets": targets}


def _compare(role: str, folder: str, state: dict, trust_remote_code: bool) -> dict:
    import torch

    insp = inspect_checkpoint(folder, trust_remote_code=trust_remote_code, validate=False)
    if role == "adapter":
        marker = f".{ADAPTER_NAME}."
        state = {k.replace(marker, "."): v for k, v in state.items()}
    with torch.no_grad():  # DeepSpeed's tensors may require grad
        rows = _rows(insp, state)
    seen = {r["model name"] for r in rows if r["status"] != "only in file"}
    # zero_to_fp32 lists a tied weight under both names; the files hold it once (as
    # save_pretrained writes a tied model): its target is no tensor missing from them.
    seen |= {target for target, source in insp.names.tied.items() if source in seen and target in state}
    differing = [r["tensor"] for r in rows if r["status"] not in ("match", "only in file")]
    compared = [r for r in rows if r["max |cast − saved|"] is not None]
    return {"role": role, "folder": folder, "compared": len(compared),
            "matching": sum(1 for r in rows if r["status"] == "match"),
            "differing": len(differing), "differing_keys": differing,
            "max_abs_cast": max((r["max |cast − saved|"] for r in compared), default=0.0),
            "max_abs_fp32": max((r["max |fp32 − saved|"] for r in compared), default=0.0),
            "only_in_zero": sorted(set(state) - seen),
            "only_in_file": [r["tensor"] for r in rows if r["status"] == "only in file"],
            "rows": rows}


def _rows(insp, state: dict) -> list[dict]:
    """One row per saved tensor: its difference from the consolidated one."""
    from safetensors import safe_open

    rows = []
    for shard in insp.shards:
        if not shard.ok:
            continue
        with safe_open(str(shard.path), framework="pt") as fh:
            for key in fh.keys():
                entry = shard.tensors[key]
                name = insp.names.to_model(key)
                row = {"tensor": key, "model name": name, "saved dtype": entry.dtype,
                       "shape": list(entry.shape), "max |cast − saved|": None,
                       "max |fp32 − saved|": None, "status": "only in file"}
                rows.append(row)
                if name not in state:
                    continue
                zero = state[name]
                zero = zero.contiguous() if hasattr(zero, "contiguous") else zero  # lazy_mode
                saved = fh.get_tensor(key)
                if tuple(zero.shape) != tuple(saved.shape):
                    row["status"] = f"shape {list(zero.shape)} in ZeRO"
                    continue
                cast = float((zero.to(saved.dtype).float() - saved.float()).abs().max()) if saved.numel() else 0.0
                full = float((zero.float() - saved.float()).abs().max()) if saved.numel() else 0.0
                row.update({"max |cast − saved|": cast, "max |fp32 − saved|": full,
                            "status": "match" if cast == 0.0 else "differs"})
    return rows
