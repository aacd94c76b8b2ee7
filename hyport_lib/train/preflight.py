"""Everything checked before a training process starts, and the plan it produces.

:func:`prepare` turns a :class:`~hyport_lib.train.config.TrainConfig` into a
:class:`LaunchPlan` or raises an error that names the parameter, the file or the record:
the model folder, the dataset (every malformed record, see
:mod:`hyport_lib.train.dataset`; too-long samples after tokenisation), the output
folder (writable), the cards (none busy), the rendezvous port (free, or a free one
picked), the resume point (complete, same world size and versions). Only then does
:mod:`hyport_lib.train.launch` start torchrun.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional

from hyport_lib.models.preflight import check_attn_implementation
from hyport_lib.train.config import TrainConfig
from hyport_lib.train.ownership import check_foreign, lock_output_dir, release_output_dir
from hyport_lib.train.rendezvous import check_master_addr, rendezvous_port
from hyport_lib.utils.files import ensure_writable


@dataclass
class LaunchPlan:
    """What will run (all paths absolute); :meth:`to_dict` is what the record keeps."""

    config: TrainConfig
    device_kind: str
    nproc_per_node: int
    world_size: int
    model_path: str
    dataset_path: str
    image_root: Optional[str]
    output_dir: str
    metrics_path: str
    log_path: str
    precision: str
    attn_implementation: str
    attention_backend: str
    deepspeed: dict
    deepspeed_config_path: str
    master_addr: str
    master_port: int
    dataset: dict = field(default_factory=dict)
    skip_records: list[int] = field(default_factory=list)
    resume_checkpoint: Optional[str] = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["config"] = self.config.to_dict()
        return data

    def worker_spec(self) -> dict:
        """What every rank reads from ``HYPORT_TRAIN_SPEC``."""
        keys = ("model_path", "dataset_path", "image_root", "output_dir", "metrics_path",
                "precision", "attn_implementation", "attention_backend", "deepspeed_config_path",
                "skip_records", "device_kind")
        return {"config": self.config.to_dict(), **{k: getattr(self, k) for k in keys}}


def default_output_dir(run_name: str) -> Path:
    """``<run folder>/train/<run_name>`` in a report run; elsewhere a new
    ``<run_name>-<timestamp>`` folder beside the interactive results, so that running the
    notebook again trains again (give ``output_dir`` to resume a run)."""
    import datetime as _dt

    from hyport_lib.results import results_dir

    run_dir = os.environ.get("HYPORT_RUN_DIR")
    if run_dir:
        return Path(run_dir) / "train" / run_name
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return results_dir().parent / "train" / f"{run_name}-{stamp}-{os.getpid()}"


def prepare(config: TrainConfig, backend=None, *, check_port: bool = True) -> LaunchPlan:
    """Check everything and plan the launch (see the module docstring). The output folder
    is locked for this process from here to the end of :func:`launch`
    (:mod:`hyport_lib.train.ownership`)."""
    from hyport_lib.backend import get_backend

    config = config.with_env_overrides()
    backend = backend or get_backend(config.device, num_cards=config.num_cards)
    nproc = _cards(backend, config.num_cards)
    world = nproc * config.nnodes
    notes = [f"{var}={value} from the environment overrides the parameter"
             for var, value in config.env_overrides.items()]
    model_path = _model_path(config)
    _check_not_the_model(config, model_path)
    output_dir = _output_dir(config)
    # Locked while the checks write into the folder; launch() locks it again for the run.
    lock_output_dir(output_dir, config.node_rank)
    try:
        return _prepare(config, backend, check_port, nproc, world, notes, model_path, output_dir)
    finally:
        release_output_dir(output_dir)


def _prepare(config: TrainConfig, backend, check_port: bool, nproc: int, world: int, notes: list[str],
             model_path: str, output_dir: Path) -> LaunchPlan:
    from hyport_lib.train import deepspeed_config as ds
    from hyport_lib.train.checkpoints import check_compatible, list_checkpoints, resolve_resume
    from hyport_lib.train.metrics import METRICS_FILE

    notes.extend(check_foreign(output_dir, config.overwrite_output_dir))
    dataset_path, image_root = _dataset_path(config, output_dir)
    precision = ds.resolve_precision(config.precision, backend)
    deepspeed = ds.build_deepspeed_config(config, backend, precision)
    report, skip = _check_dataset(config, dataset_path, image_root, model_path, output_dir, world)
    notes.extend(report.get("notes", []))
    if skip:
        notes.append(f"{len(skip)} bad record(s) skipped (skip_bad_records=True)")
    checkpoint = resolve_resume(config.resume_from, output_dir)
    if checkpoint is None:
        earlier = [c.path.name for c in list_checkpoints(output_dir)]
        if earlier:  # the workers remove them (drop_checkpoints_after): say so before they do
            named = f"{', '.join(earlier[:3])}{', ...' if len(earlier) > 3 else ''}"
            why = ("none of them is complete" if config.resume_from.lower() == "auto"
                   else "resume_from='auto' would resume the newest complete one instead")
            notes.append(f"starts from scratch in a folder with {len(earlier)} earlier checkpoint(s) "
                         f"({named}): they will be removed; {why}")
    if checkpoint is not None:
        check_compatible(checkpoint, world_size=world, zero_stage=config.zero_stage,
                         finetuning_type=config.finetuning_type)
        if config.max_steps is not None and checkpoint.step >= config.max_steps:
            raise ValueError(f"resume_from={config.resume_from!r} resumes {checkpoint.path.name} (step "
                             f"{checkpoint.step}), but max_steps={config.max_steps}: nothing is left to "
                             f"train; raise max_steps, or resume_from='none' to start again")
        notes.append(f"resumes from {checkpoint.path.name} (step {checkpoint.step})")
        later_checkpoints = [c for c in list_checkpoints(output_dir) if c.step > checkpoint.step]
        later = [c.path.name + (f" ({c.why_incomplete})" if c.why_incomplete else "") for c in later_checkpoints]
        # An older checkpoint chosen by hand would drop later complete ones: only when allowed.
        # (With 'auto' the later ones are incomplete: saves killed half-way, hyport's to drop.)
        dropped_complete = [c.path.name for c in later_checkpoints if c.complete]
        if dropped_complete and not config.overwrite_output_dir:
            raise ValueError(f"resume_from={config.resume_from!r} resumes {checkpoint.path.name}, but "
                             f"output_dir holds {len(dropped_complete)} later complete checkpoint(s) "
                             f"({', '.join(dropped_complete[:3])}{', ...' if len(dropped_complete) > 3 else ''}) "
                             "that the run would remove; resume_from='auto' takes the newest, or allow it "
                             "with overwrite_output_dir=True")
        if later:  # the workers remove them (drop_checkpoints_after): say so before they do
            notes.append(f"{len(later)} later checkpoint(s) in output_dir ({', '.join(later[:3])}"
                         f"{', ...' if len(later) > 3 else ''}) will be removed: the run continues "
                         f"from step {checkpoint.step} and writes its own")
        if config.resume_from.lower() not in ("auto", "none"):
            # The workers start inside output_dir: a relative folder would point elsewhere there.
            config = replace(config, resume_from=str(checkpoint.path.resolve()))
    check_master_addr(config)
    port = rendezvous_port(config, check_port)
    attn, attention_backend = _attention(config, backend)
    if config.packing:
        notes.append(f"packing: attention {attn} (per sample in every case; transformers' "
                     "eager and sdpa keep packed samples apart only while no KV cache is used)")
    _check_cards(backend, nproc)
    if config.finetuning_type == "lora":
        notes.extend(_check_lora_targets(config, model_path))
    ds_path = ds.write_deepspeed_config(deepspeed, output_dir)
    return LaunchPlan(
        config=config, device_kind=backend.kind, nproc_per_node=nproc, world_size=world,
        model_path=model_path, dataset_path=str(dataset_path), image_root=image_root,
        output_dir=str(output_dir), metrics_path=str(output_dir / METRICS_FILE),
        log_path=str(output_dir / "logs" / f"node{config.node_rank}.log"), precision=precision,
        attn_implementation=attn, attention_backend=attention_backend,
        deepspeed=ds.describe(deepspeed), deepspeed_config_path=str(ds_path),
        master_addr=config.master_addr, master_port=port, dataset=report, skip_records=skip,
        resume_checkpoint=str(checkpoint.path) if checkpoint else None, notes=notes)


def _cards(backend, num_cards: Optional[int]) -> int:
    if backend.kind == "cpu":
        from hyport_lib.devices.host_memory import require_host_ram

        count = int(num_cards or backend.num_cards())
        require_host_ram("cpu", count, "training processes")
        return count
    visible = backend.num_cards()
    if num_cards is not None and num_cards > visible:
        raise ValueError(f"num_cards={num_cards}: only {visible} {backend.kind} card(s) are visible")
    if visible < 1:
        raise RuntimeError(f"no {backend.kind} card is visible")
    return int(num_cards or visible)


def _model_path(config: TrainConfig) -> str:
    from hyport_lib.models.preflight import check_model_path

    return check_model_path(config.model_path)


def _check_not_the_model(config: TrainConfig, model_path: str) -> None:
    """The final weights go into output_dir: there they would replace the model trained."""
    if not config.output_dir or not Path(model_path).is_dir():
        return
    if Path(config.output_dir).expanduser().resolve() == Path(model_path).resolve():
        raise ValueError(f"output_dir={config.output_dir!r} is the model folder (model_path="
                         f"{config.model_path!r}): the final weights would overwrite the model "
                         f"being trained; choose another output_dir")


def _output_dir(config: TrainConfig) -> Path:
    folder = Path(config.output_dir).expanduser() if config.output_dir else default_output_dir(config.run_name)
    folder = folder.resolve()
    try:
        ensure_writable(folder / "logs")
        ensure_writable(folder)
    except OSError as exc:
        raise PermissionError(exc.errno, f"output_dir={str(folder)!r} is not writable ({exc.strerror})",
                              str(folder)) from exc
    return folder


def _dataset_path(config: TrainConfig, output_dir: Path) -> tuple[Path, Optional[str]]:
    if not config.dataset_path:
        from hyport_lib.train.smoke_data import write_smoke_dataset

        return write_smoke_dataset(output_dir / "smoke_data"), None
    path = Path(config.dataset_path).expanduser().resolve()
    root = str(Path(config.image_root).expanduser().resolve()) if config.image_root else None
    return path, root


def _check_dataset(config: TrainConfig, path: Path, image_root: Optional[str],
                   model_path: str, output_dir: Path, world: int) -> tuple[dict, list[int]]:
    from hyport_lib.models.loading import load_processor
    from hyport_lib.train.dataset import DatasetError, DatasetReport, load_dataset
    from hyport_lib.train.samples import encode_records

    report = load_dataset(path, image_root)
    try:
        loaded = load_processor(model_path, trust_remote_code=config.trust_remote_code)
    except Exception as exc:  # noqa: BLE001 — any loader failure: name the folder and the files
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"model_path={model_path!r}: its processor / tokenizer does not load "
                         f"(training needs the tokenizer files, e.g. tokenizer.json or "
                         f"tokenizer_config.json, and for images preprocessor_config.json): "
                         f"{type(exc).__name__}: {first[:300]}") from None
    if config.packing and loaded.traits.packing_refusal:
        raise ValueError(f"packing=True: {loaded.traits.packing_refusal}")
    from transformers.utils import logging as hf_logging

    # Long samples are this check's own finding (too_long): not also transformers' warning
    # "Token indices sequence length is longer than ..." above the listing.
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        samples, too_long = encode_records(report.records, loaded, config.max_seq_len, config.overflow)
    finally:
        hf_logging.set_verbosity(level)
    notes: list[str] = [f"processor: {part}" for part in loaded.unavailable]
    if not config.dataset_path:
        # The bundled smoke set was not the user's choice: records this model cannot take
        # (images for a text-only model) are left out and said so, not refused.
        left = [p for p in too_long if p.kind == "not_applicable"]
        too_long = [p for p in too_long if p.kind != "not_applicable"]
        if left:
            notes.append(f"bundled smoke set: {len(left)} record(s) not applicable to this "
                         f"{loaded.traits.kind} model left out ({left[0].message})")
    if config.overflow == "drop":
        # Asked for: too-long samples are dropped (the workers drop them the same way), and counted.
        dropped = [p for p in too_long if p.kind == "too_long"]
        too_long = [p for p in too_long if p.kind != "too_long"]
        if dropped:
            notes.append(f"overflow='drop': {len(dropped)} record(s) longer than max_seq_len="
                         f"{config.max_seq_len} dropped (first: record {dropped[0].index}, id "
                         f"{dropped[0].record_id!r}, {dropped[0].message.split(' >')[0]})")
    problems = sorted(report.problems + too_long, key=lambda p: p.index)
    full = DatasetReport(report.path, report.records, problems, report.total)
    if problems:
        # Every problem, however many: the message shows the first ones.
        from hyport_lib.utils.files import atomic_write_text

        listing = atomic_write_text(output_dir / "dataset_problems.jsonl",
                                    "".join(json.dumps(p.to_dict(), ensure_ascii=False) + "\n"
                                            for p in problems))
    if problems and not config.skip_bad_records:
        raise DatasetError(full, problems_file=str(listing))
    if not samples:
        raise ValueError(f"dataset {path}: no usable record left ({full.summary()})")
    _check_mixed_images(config, world, path, samples)
    summary = full.to_dict()
    summary.update(samples=len(samples), tokens=sum(len(s) for s in samples),
                   label_tokens=sum(s.label_tokens for s in samples),
                   truncated=sum(1 for s in samples if s.truncated), skipped=len(full.bad_indices),
                   model_kind=loaded.traits.kind, prompt_format=loaded.prompt_format,
                   image_samples=sum(1 for s in samples if s.pixel_values is not None),
                   processor_unavailable=list(loaded.unavailable), notes=notes)
    return summary, sorted(full.bad_indices)


def _check_mixed_images(config: TrainConfig, world: int, path: Path, samples) -> None:
    """ZeRO-3 on several processes cannot mix text-only and image batches.

    A text-only batch does not run the vision tower, so that rank gathers other
    parameters than a rank with images and DeepSpeed's collectives abort or hang. ZeRO 0
    to 2 run a blank image on text-only batches instead (see the Trainer in
    ``callbacks``); under ZeRO-3 that hangs too, so rows (packed or not) without an image
    beside rows with one are refused here.
    """
    if config.zero_stage != 3 or world < 2:
        return
    from hyport_lib.train.packing import training_rows

    rows = training_rows(samples, config.max_seq_len, config.packing)
    text_only = [row for row in rows if all(s.pixel_values is None for s in row)]
    if text_only and len(text_only) < len(rows):
        raise ValueError(
            f"dataset {path}: {len(text_only)} of {len(rows)} training rows hold no image (e.g. record "
            f"{text_only[0][0].record_id!r}): under zero_stage=3 on {world} processes a text-only batch "
            f"leaves the vision tower out on one rank and DeepSpeed's collectives abort; use "
            f"zero_stage=2, packing, one process, or records of one kind")


def _attention(config: TrainConfig, backend) -> tuple[str, str]:
    """``(attn_implementation, FlashAttnAPI backend)``; packing needs hyport's attention."""
    api_backend = "npu" if backend.kind == "npu" else "sdpa"
    if not config.packing:
        check_attn_implementation(config.attn_implementation)
        return config.attn_implementation, api_backend
    return {"npu": "hyport_npu_fused", "sdpa": "hyport_torch"}[api_backend], api_backend


def _check_lora_targets(config: TrainConfig, model_path: str) -> list[str]:
    """The LoRA targets must name layers of the model: checked on an empty (meta) model,
    before an 8-card job loads the weights only to fail in peft. Returns notes for the
    plan (MoE experts LoRA does not reach)."""
    import importlib.util

    if importlib.util.find_spec("peft") is None:
        raise ValueError("finetuning_type='lora' needs peft, which is not installed here "
                         "(pip install 'peft>=0.10'; it leaves torch as it is)")

    from hyport_lib.models.loading import build_empty_model
    from hyport_lib.models.lora_targets import (fused_experts, language_model_path, leaf_names,
                                                lora_target_pattern, matched_layers)

    model = build_empty_model(model_path, trust_remote_code=config.trust_remote_code)
    prefix = language_model_path(model)
    if not matched_layers(model, lora_target_pattern(prefix, config.lora_targets)):
        raise ValueError(f"lora_target={config.lora_target!r}: no layer of the language model "
                         f"({prefix or type(model).__name__}) has that name (its layers: "
                         f"{', '.join(leaf_names(model, prefix))})")
    experts = fused_experts(model, prefix)
    wants_mlp = config.lora_targets == ["all"] or {"gate_proj", "up_proj", "down_proj"} & set(config.lora_targets)
    if not experts or not wants_mlp:
        return []
    return [f"lora_target={config.lora_target!r}: the MoE experts ({len(experts)} blocks such as "
            f"{experts[0]}) hold fused weights, not linear layers: no LoRA target reaches them and "
            "they stay frozen (a shared MLP, where there is one, is adapted)"]


def _check_cards(backend, nproc: int) -> None:
    """Refuse cards another process holds (nothing is ever killed)."""
    if backend.kind == "cpu":
        return
    from hyport_lib.devices.card_plan import plan_grid

    plan = plan_grid(backend, num_cards=nproc)
    busy = [c for c in plan.cards if not c.run]
    if busy:
        detail = "; ".join(f"card {c.card}: {c.busy_reason}" for c in busy)
        raise RuntimeError(f"busy cards, training not started: {detail} (free them first; "
                           "hyport never stops a process it did not start)")
