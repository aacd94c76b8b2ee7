"""Everything checked before a training process starts, and the plan it produces. Nothing is
written (``hyport report`` plans every stage before any runs): what the run needs on disk the
launch writes under the folder's lock.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import re
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.devices.card_plan import plan_grid
from hyport_lib.devices.host_memory import require_host_ram
from hyport_lib.memory.capacity import capacity
from hyport_lib.memory.record import MemoryPlan
from hyport_lib.memory.shape import model_shape
from hyport_lib.models.loading import LoadedProcessor, ProcessorUnavailable, build_empty_model, load_processor
from hyport_lib.models.module_tree import (fused_experts, language_model_path, leaf_names,
                                          lora_target_pattern, matched_layers)
from hyport_lib.models.preflight import check_decoder_only, check_model_path
from hyport_lib.nodes.addresses import RESOLVE_TIMEOUT_S, ThisMachine, port_taken, resolve_name
from hyport_lib.nodes.inputs import settle_node_parameters
from hyport_lib.nodes.start_command import start_notes
from hyport_lib.proof.choice import TRAINING, choose_attention
from hyport_lib.proof.swap import AttentionProof
from hyport_lib.results import RUN_DIR_ENV, fresh_folder_beside_results
from hyport_lib.train import deepspeed_config as ds
from hyport_lib.train.dataset import DatasetError, DatasetReport, load_dataset
from hyport_lib.train.memory_plan import expects_eager, judge_memory
from hyport_lib.train.output_dir import (DEEPSPEED_FILE, METRICS_FILE, SMOKE_FOLDER, Checkpoint, check_compatible,
                                         check_foreign, check_not_locked, list_checkpoints, resolve_resume)
from hyport_lib.train.packing import proof_batches, training_rows
from hyport_lib.train.params import Params
from hyport_lib.train.samples import encode_records, prefix_format_note, system_prompt_note
from hyport_lib.train.smoke_data import SMOKE_FILE, write_smoke_dataset
from hyport_lib.utils.wording import counted, plural


@dataclass
class LaunchPlan:
    """What will run (all paths absolute). ``params`` are checked once, here (the workers rebuild
    them from :meth:`worker_spec`); ``bundled_dataset``: the launch writes the smoke set to
    ``dataset_path``; ``deepspeed``: the settings a reader wants to see, ``deepspeed_json`` all."""

    params: Params
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
    deepspeed: ds.DeepSpeedSettings
    deepspeed_json: dict
    deepspeed_config_path: str
    master_addr: str
    master_port: int
    bundled_dataset: bool = False
    dataset: dict = field(default_factory=dict)
    skip_records: list[int] = field(default_factory=list)
    resume_checkpoint: Optional[str] = None
    notes: list[str] = field(default_factory=list)
    attention_proof: Optional[AttentionProof] = None
    #: one rank's card and host memory, judged before the dataset was read; None in older records
    memory: Optional[MemoryPlan] = None
    #: why ``precision`` (the backend's words: native bf16 or not, asked or auto); "" in older records
    precision_reason: str = ""
    #: torchrun's c10d rendezvous id (nnodes > 1; :func:`job_rdzv_id`)
    rdzv_id: str = ""

    def worker_spec(self) -> dict:
        """What every rank reads (:data:`~hyport_lib.train.launch.SPEC_ENV`): the plan without what
        only the launcher reads (an environment variable is bounded)."""
        keys = ("model_path", "dataset_path", "image_root", "output_dir", "metrics_path",
                "precision", "attn_implementation", "attention_backend", "deepspeed_config_path",
                "skip_records", "device_kind", "resume_checkpoint", "master_addr", "master_port", "rdzv_id")
        return {"params": self.params.to_dict(), **{k: getattr(self, k) for k in keys}}


def default_output_dir(run_name: str) -> Path:
    """``<run folder>/train/<run_name>`` in a report run; elsewhere a new ``<run_name>-<timestamp>``
    folder beside the interactive results: running the notebook again trains again."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if run_dir:
        return Path(run_dir) / "train" / run_name
    return fresh_folder_beside_results("train", run_name)


def prepare(params: Params, backend) -> LaunchPlan:
    """Check everything and plan the launch on ``backend``. Raises ValueError, PermissionError or
    RuntimeError naming what is wrong (:class:`~hyport_lib.train.dataset.DatasetError`: every bad record)."""
    params, node_notes = settle_node_parameters(params)  # nodes_from first: it sets nnodes, num_cards ...
    nproc = _cards(backend, params.num_cards)
    world = nproc * params.nnodes
    model_path = check_model_path(params.model_path, local_only="stage 04 (training)")
    check_decoder_only(model_path, "stage 04")  # before the processor or the model loads
    _check_not_the_model(params, model_path)
    output_dir = _output_dir(params)
    check_not_locked(output_dir, params.node_rank)
    notes = node_notes + check_foreign(output_dir, params.overwrite_output_dir)
    precision = ds.resolve_precision(params.precision, backend)
    deepspeed = ds.build_deepspeed_config(params, backend, precision.precision)
    # Memory before the dataset: a run that cannot fit is said so before its records are read.
    shape = model_shape(model_path, trust_remote_code=params.trust_remote_code)
    eager = expects_eager(params)
    room = capacity(backend, params.card_memory_gib)
    memory = judge_memory(params, backend.kind, shape, precision.precision, deepspeed, nproc, room, eager=eager)
    bundled = not params.dataset_path
    if bundled:
        dataset_path, image_root = output_dir / SMOKE_FOLDER / SMOKE_FILE, None
        # Checked from a private copy (the proof reads its images too): the one the workers
        # read is written at launch.
        with tempfile.TemporaryDirectory(prefix="hyport-smoke-") as scratch:
            report = load_dataset(write_smoke_dataset(scratch))
            report.path = str(dataset_path)
            summary, skip, attention = _check_data_and_attention(params, backend, report, model_path, world)
    else:
        dataset_path = Path(params.dataset_path).expanduser().resolve()
        image_root = str(Path(params.image_root).expanduser().resolve()) if params.image_root else None
        report = load_dataset(dataset_path, image_root, options=params.dataset_options)
        summary, skip, attention = _check_data_and_attention(params, backend, report, model_path, world)
        if report.layout is not None:
            notes += [f"dataset {report.path}: {t}" for t in (report.layout.note(), report.layout.caveat) if t]
    notes.extend(summary["notes"])
    if skip:
        notes.append(f"{counted(len(skip), 'bad record')} skipped (skip_bad_records=True)")
    checkpoint, resume_notes = _resume(params, output_dir, world)
    notes.extend(resume_notes)
    check_master_addr(params)
    port = rendezvous_port(params)
    attn, attention_backend = attention.attn_implementation, attention.backend
    if attention.note:
        notes.append(attention.note)
    if params.packing:
        notes.append(f"packing: attention {attn} (per sample in every case; transformers' "
                     "eager and sdpa keep packed samples apart only while no KV cache is used)")
    if (attn == "eager") != eager:  # a swap that did not prove itself keeps eager: its scores count
        memory = judge_memory(params, backend.kind, shape, precision.precision, deepspeed, nproc, room,
                              eager=attn == "eager")
    _check_cards(backend, nproc)
    if params.finetuning_type == "lora":
        notes.extend(_check_lora_targets(params, model_path))
    notes.append(params.shard_size_note())
    notes.extend(start_notes(params, output_dir=str(output_dir)))
    return LaunchPlan(
        params=params, device_kind=backend.kind, nproc_per_node=nproc, world_size=world,
        model_path=model_path, dataset_path=str(dataset_path), image_root=image_root,
        output_dir=str(output_dir), metrics_path=str(output_dir / METRICS_FILE),
        log_path=str(output_dir / "logs" / f"node{params.node_rank}.log"), precision=precision.precision,
        precision_reason=precision.reason,
        attn_implementation=attn, attention_backend=attention_backend,
        deepspeed=ds.describe(deepspeed), deepspeed_json=deepspeed,
        deepspeed_config_path=str(output_dir / DEEPSPEED_FILE), master_addr=params.master_addr,
        master_port=port, bundled_dataset=bundled, dataset=summary, skip_records=skip,
        # absolute: the workers start inside output_dir, where a relative folder points elsewhere
        resume_checkpoint=str(checkpoint.path.resolve()) if checkpoint else None,
        notes=notes, attention_proof=attention.proof, memory=MemoryPlan.of(memory),
        rdzv_id=job_rdzv_id(params) if params.nnodes > 1 else "")


def _check_data_and_attention(params: Params, backend, report: DatasetReport, model_path: str, world: int):
    """``(the dataset's summary, records to skip, the attention chosen)``: the swap's proof runs
    on the first rows the workers will train."""
    summary, skip, loaded = _check_dataset(params, report, model_path, world)
    attention = choose_attention(
        params.attn_implementation, backend.kind, TRAINING, model_path,
        lambda folder: proof_batches(params, folder, loaded, report.records, skip),
        packing=params.packing, trust_remote_code=params.trust_remote_code, seed=params.seed)
    return summary, skip, attention


def _resume(params: Params, output_dir: Path, world: int) -> tuple[Optional[Checkpoint], list[str]]:
    """The resume point, checked against this run: ``(checkpoint or None, notes)``."""
    notes = []
    checkpoint = resolve_resume(params.resume_from, output_dir)
    if checkpoint is None:
        earlier = [c.path.name for c in list_checkpoints(output_dir)]
        if earlier:  # the workers remove them (drop_checkpoints_after): say so before they do
            why = ("none of them is complete" if params.resume_from.lower() == "auto"
                   else "resume_from='auto' would resume the newest complete one instead")
            notes.append(f"starts from scratch in a folder with {counted(len(earlier), 'earlier checkpoint')} "
                         f"({_first_three(earlier)}): they will be removed; {why}")
        return None, notes
    check_compatible(checkpoint, world_size=world, zero_stage=params.zero_stage,
                     finetuning_type=params.finetuning_type)
    if params.max_steps is not None and checkpoint.step >= params.max_steps:
        raise ValueError(f"resume_from={params.resume_from!r} resumes {checkpoint.path.name} (step "
                         f"{checkpoint.step}), but max_steps={params.max_steps}: nothing is left to "
                         f"train; raise max_steps, or resume_from='none' to start again")
    notes.append(f"resumes from {checkpoint.path.name} (step {checkpoint.step})")
    later_checkpoints = [c for c in list_checkpoints(output_dir) if c.step > checkpoint.step]
    later = [c.path.name + (f" ({c.why_incomplete})" if c.why_incomplete else "") for c in later_checkpoints]
    # An older checkpoint chosen by hand would drop later complete ones: only when allowed.
    # (With 'auto' the later ones are incomplete: saves killed half-way, hyport's to drop.)
    dropped_complete = [c.path.name for c in later_checkpoints if c.complete]
    if dropped_complete and not params.overwrite_output_dir:
        raise ValueError(f"resume_from={params.resume_from!r} resumes {checkpoint.path.name}, but "
                         f"output_dir holds {counted(len(dropped_complete), 'later complete checkpoint')} "
                         f"({_first_three(dropped_complete)}) "
                         "that the run would remove; resume_from='auto' takes the newest, or allow it "
                         "with overwrite_output_dir=True")
    if later:  # the workers remove them (drop_checkpoints_after): say so before they do
        notes.append(f"{counted(len(later), 'later checkpoint')} in output_dir ({_first_three(later)}) will be "
                     f"removed: the run continues from step {checkpoint.step} and writes its own")
    return checkpoint, notes


def _first_three(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _cards(backend, num_cards: Optional[int]) -> int:
    if backend.kind == "cpu":
        count = int(num_cards or backend.num_cards())
        require_host_ram("cpu", count, "training process")  # before the model is read: 64 "cards"
        return count
    visible = backend.num_cards()
    if num_cards is not None and num_cards > visible:
        raise ValueError(f"num_cards={num_cards}: only {visible} {backend.kind} {plural('card', visible)} "
                         f"{plural('is', visible, 'are')} visible")
    if visible < 1:
        raise RuntimeError(f"no {backend.kind} card is visible")
    return int(num_cards or visible)


def _check_not_the_model(params: Params, model_path: str) -> None:
    if params.output_dir is None or not Path(model_path).is_dir():
        return
    if Path(params.output_dir).expanduser().resolve() == Path(model_path).resolve():
        raise ValueError(f"output_dir={params.output_dir!r} is the model folder (model_path="
                         f"{params.model_path!r}): the final weights would overwrite the model "
                         f"being trained; choose another output_dir")


def _output_dir(params: Params) -> Path:
    """The output folder (absolute), checked writable without creating it: the nearest
    folder that exists must let this process create the rest."""
    given = params.output_dir
    folder = (Path(given).expanduser() if given is not None else default_output_dir(params.run_name)).resolve()
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise PermissionError(errno.ENOTDIR, f"output_dir={str(folder)!r} is not writable ({existing} is a "
                              "file, not a folder)", str(folder))
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"output_dir={str(folder)!r} is not writable (no write "
                              f"permission in {existing})", str(folder))
    return folder


def _check_dataset(params: Params, report: DatasetReport, model_path: str,
                   world: int) -> tuple[dict, list[int], LoadedProcessor]:
    """``(summary, records to skip, the processor)``: the dataset tokenised as the workers will
    (:class:`DatasetError` unless ``skip_bad_records``)."""
    from transformers.utils import logging as hf_logging

    try:
        loaded = load_processor(model_path, trust_remote_code=params.trust_remote_code)
    except ProcessorUnavailable:
        raise  # already one line naming the folder, the class and what to install
    except Exception as exc:  # noqa: BLE001 — any loader failure: name the folder and the files
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"model_path={model_path!r}: its processor / tokenizer does not load "
                         f"(training needs the tokenizer files, e.g. tokenizer.json or "
                         f"tokenizer_config.json, and for images preprocessor_config.json): "
                         f"{type(exc).__name__}: {first[:300]}") from None
    if params.packing and loaded.traits.packing_refusal:
        raise ValueError(f"packing=True: {loaded.traits.packing_refusal}")
    # Long samples are this check's own finding (too_long): not also transformers' warning
    # "Token indices sequence length is longer than ..." above the listing.
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        samples, too_long = encode_records(report.records, loaded, params.max_seq_len, params.overflow)
    finally:
        hf_logging.set_verbosity(level)
    notes: list[str] = [f"processor: {part}" for part in loaded.unavailable]
    notes += [text for text in (system_prompt_note(loaded, report.records),
                                prefix_format_note(loaded, report.records)) if text]
    if not params.dataset_path:
        # The bundled smoke set was not the user's choice: records this model cannot take
        # (images for a text-only model) are left out and said so, not refused.
        left = [p for p in too_long if p.kind == "not_applicable"]
        too_long = [p for p in too_long if p.kind != "not_applicable"]
        if left:
            notes.append(f"bundled smoke set: {counted(len(left), 'record')} not applicable to this "
                         f"{loaded.traits.kind} model left out ({left[0].message})")
    if params.overflow == "drop":
        # Asked for: too-long samples are dropped (the workers drop them the same way), and counted.
        dropped = [p for p in too_long if p.kind == "too_long"]
        too_long = [p for p in too_long if p.kind != "too_long"]
        if dropped:
            notes.append(f"overflow='drop': {counted(len(dropped), 'record')} longer than max_seq_len="
                         f"{params.max_seq_len} dropped (first: record {dropped[0].index}, id "
                         f"{dropped[0].record_id!r}, {dropped[0].message.split(' >')[0]})")
    problems = sorted(report.problems + too_long, key=lambda p: p.index)
    full = DatasetReport(report.path, report.records, problems, report.total, report.layout)
    if problems and not params.skip_bad_records:
        raise DatasetError(full)
    if not samples:
        raise ValueError(f"dataset {report.path}: no usable record left ({full.summary()})")
    _check_mixed_images(params, world, report.path, samples)
    summary = full.to_dict()
    summary.update(samples=len(samples), tokens=sum(len(s) for s in samples),
                   label_tokens=sum(s.label_tokens for s in samples),
                   truncated=sum(1 for s in samples if s.truncated), skipped=len(full.bad_indices),
                   model_kind=loaded.traits.kind, prompt_format=loaded.prompt_format,
                   image_samples=sum(1 for s in samples if s.pixel_values is not None),
                   processor_unavailable=list(loaded.unavailable), notes=notes)
    return summary, sorted(full.bad_indices), loaded


def _check_mixed_images(params: Params, world: int, path: str, samples) -> None:
    """ZeRO-3 on several processes cannot mix text-only and image batches: the blank image
    ZeRO 0-2 run instead (:class:`~hyport_lib.train.callbacks.CountingTrainer`) hangs there."""
    if params.zero_stage != 3 or world < 2:
        return
    rows = training_rows(samples, params.max_seq_len, params.packing)
    text_only = [row for row in rows if all(s.pixel_values is None for s in row)]
    if text_only and len(text_only) < len(rows):
        raise ValueError(
            f"dataset {path}: {len(text_only)} of {len(rows)} training rows hold no image (e.g. record "
            f"{text_only[0][0].record_id!r}): under zero_stage=3 on {world} processes a text-only batch "
            f"leaves the vision tower out on one rank and DeepSpeed's collectives abort; use "
            f"zero_stage=2, packing, one process, or records of one kind")


def _check_lora_targets(params: Params, model_path: str) -> list[str]:
    """The LoRA targets must name layers of the model: checked on an empty (meta) model before an
    8-card job loads the weights only to fail in peft; the notes name MoE experts LoRA misses."""
    if importlib.util.find_spec("peft") is None:
        raise ValueError("finetuning_type='lora' needs peft, which is not installed here "
                         "(pip install 'peft>=0.10'; it leaves torch as it is)")
    model = build_empty_model(model_path, trust_remote_code=params.trust_remote_code)
    prefix = language_model_path(model)
    if not matched_layers(model, lora_target_pattern(prefix, params.lora_targets)):
        raise ValueError(f"lora_target={params.lora_target!r}: no layer of the language model "
                         f"({prefix or type(model).__name__}) has that name (its layers: "
                         f"{', '.join(leaf_names(model, prefix))})")
    experts = fused_experts(model, prefix)
    wants_mlp = params.lora_targets == ["all"] or {"gate_proj", "up_proj", "down_proj"} & set(params.lora_targets)
    if not experts or not wants_mlp:
        return []
    return [(f"lora_target={params.lora_target!r}: the MoE experts ({len(experts)} blocks such as "
             f"{experts[0]}) hold fused weights, not linear layers: no LoRA target reaches them and "
             "they stay frozen (a shared MLP, where there is one, is adapted)")]


def _check_cards(backend, nproc: int) -> None:
    """Refuse cards another process holds (nothing is ever killed)."""
    if backend.kind == "cpu":
        return
    plan = plan_grid(backend, num_cards=nproc)
    busy = [c for c in plan.cards if not c.run]
    if busy:
        detail = "; ".join(f"card {c.card}: {c.busy_reason}" for c in busy)
        raise RuntimeError(f"busy cards, training not started: {detail} (free them first; "
                           "hyport never stops a process it did not start)")


# --------------------------------------------------------------------------- where the ranks meet

def job_rdzv_id(params: Params) -> str:
    """The rendezvous id: ``rdzv_id`` as given, else the same text on every node from what every
    node is given alike (run_name, master_port; never master_addr: a name on one node may be an
    address on another)."""
    if params.rdzv_id:
        return params.rdzv_id
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"hyport-{params.run_name}-{params.master_port}")


#: How long master_addr is looked up (getaddrinfo has no limit of its own).
MASTER_RESOLVE_S = RESOLVE_TIMEOUT_S


# Checked before torchrun starts: an address that does not resolve makes torchrun retry for
# ever; a taken port fails every rank.
def check_master_addr(params: Params) -> None:
    try:
        found = resolve_name(params.master_addr, MASTER_RESOLVE_S)
    except OSError as exc:
        raise ValueError(f"master_addr={params.master_addr!r} does not resolve ({exc}); give the "
                         f"master node's address or name") from None
    if not found:
        raise ValueError(f"master_addr={params.master_addr!r} does not resolve: the resolver gave no answer "
                         f"within {MASTER_RESOLVE_S:g} s; give the master node's address")
    if params.nnodes == 1 and not ThisMachine.here().is_host(params.master_addr):
        raise ValueError(f"master_addr={params.master_addr!r} is not this machine, but nnodes=1: "
                         f"a single-node run is its own master (e.g. 127.0.0.1)")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def rendezvous_port(params: Params) -> int:
    if params.master_port == 0:  # one node only (Params refuses 0 with nnodes > 1)
        return free_port(_bind_host(params.master_addr))
    if params.node_rank != 0:
        return params.master_port
    if params.nnodes > 1:  # node 0's launcher hosts the store on every interface
        where, bind = "this host", "0.0.0.0"
    elif ThisMachine.here().is_host(params.master_addr):  # torchrun's own store on master_addr
        where, bind = params.master_addr, _bind_host(params.master_addr)
    else:
        return params.master_port
    taken = port_taken(params.master_port, bind)
    if taken:
        raise ValueError(f"master_port={params.master_port} is already taken on {where} ({bind}: {taken}; "
                         "another job?); choose another port"
                         + ("" if params.nnodes > 1 else " or master_port=0 for a free one"))
    return params.master_port


def _bind_host(addr: str) -> str:
    if addr in ("localhost", "127.0.0.1"):
        return "127.0.0.1"
    try:  # the master binds that address
        return next(a for family, a in resolve_name(addr) if family == socket.AF_INET)
    except (OSError, StopIteration):
        return "0.0.0.0"
