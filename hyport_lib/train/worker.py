"""One training process: what ``torchrun`` starts on every card (``-m hyport_lib.train.worker``).

Every rank (restarted ones too) reads the checked plan from :data:`~hyport_lib.train.launch.SPEC_ENV`
(not stdin, as :func:`hyport_lib.processes.task_main`'s tasks do: the ranks share torchrun's stdin,
the lifeline their guards watch), resumes the newest complete checkpoint (after a torchrun restart
it is newer than at launch), trains under DeepSpeed and saves the final weights in ``output_dir``;
rank 0 writes its :class:`~hyport_lib.train.result.WorkerResult`. A failure is torchrun's to
report: the launcher reads the rank logs (:func:`hyport_lib.train.launch.first_failure`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Optional

from hyport_lib.backend import get_backend
from hyport_lib.checkpoint_files.header import read_header
from hyport_lib.models.loading import load_model, load_processor
from hyport_lib.models.module_tree import language_model_path, lora_target_pattern, retie
from hyport_lib.models.training_inputs import rope_positions_function
from hyport_lib.nodes.heartbeat import RankCard, client_store, publish_rank, wait_verdict
from hyport_lib.npu_attention.hf_integration import (UnsupportedAttentionArgument, register_hyport_attention,
                                                    sdpa_refusal)
from hyport_lib.processes import exit_without_teardown, start_guard
from hyport_lib.train.callbacks import CountingTrainer, MetricsCallback, StepCounts, barrier, process_group
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.held_answers import answer, held_prompts
from hyport_lib.train.launch import SPEC_ENV
from hyport_lib.train.output_dir import (RESULT_FILE, check_compatible, drop_checkpoints_after, mark_final_save_start,
                                         newest_complete, resolve_resume, write_run_marker)
from hyport_lib.train.packing import FirstBatchRecorder, first_batch_path, make_collator, training_rows
from hyport_lib.train.params import Params
from hyport_lib.train.result import WorkerResult, truncate_metrics
from hyport_lib.train.samples import Encoder
from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.redact import scrub_obj
from hyport_lib.utils.typed_records import to_mapping


def _rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def _say(message: str) -> None:
    print(f"[hyport train rank {_rank()}] {message}", flush=True)


def _local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def load_spec() -> dict:
    raw = os.environ.get(SPEC_ENV)
    if not raw:
        raise ValueError(f"{SPEC_ENV} is not set: this module is started by hyport's launcher")
    return json.loads(raw)


def _quiet_deepspeed_cpu(backend) -> None:
    """On CPU, skip DeepSpeed's shared-memory allreduce op: its CPU accelerator compiles that
    C++ op at start-up (about 70 s on a cold cache) only to speed up what gloo does anyway."""
    if backend.kind != "cpu":
        return
    import importlib

    module = importlib.import_module("deepspeed.comm.torch")
    if hasattr(module, "build_shm_op"):
        module.build_shm_op = lambda: None


def init_distributed(backend, timeout_s: float) -> None:
    """The default process group, under a key prefix per torchrun attempt: torchrun keeps one
    store across ``--max-restarts`` attempts, and restarted workers could read the dead workers'
    addresses and fail ("Gloo connectFullMesh failed ... Connection refused") or hang.
    ``timeout_s``: how long one collective may wait (collective_timeout_s)."""
    import datetime

    import torch.distributed as dist

    if "RANK" not in os.environ or dist.is_initialized():
        return
    if backend.is_accelerator:
        backend.set_device(_local_rank())
    store, rank, world = next(dist.rendezvous("env://"))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(backend.dist_backend, store=dist.PrefixStore(f"attempt_{attempt}", store),
                            rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s))


def node_handshake(spec: dict, params: Params) -> Optional[str]:
    """nnodes > 1: publish this rank's node and host, then wait for node 0's verdict (at most
    join_timeout_s) before any model loads; leave with its one line when refused. The resume
    point every rank takes: node 0's, in this node's output_dir."""
    store = client_store(spec["master_addr"], spec["master_port"], spec["rdzv_id"],
                         connect_s=params.join_timeout_s)
    rank = _rank()
    publish_rank(store, RankCard(rank=rank, local_rank=_local_rank(), node_rank=params.node_rank,
                                 group_rank=int(os.environ.get("GROUP_RANK", "0") or 0), host=socket.gethostname()))
    verdict = wait_verdict(store, params.join_timeout_s)
    if not verdict.accepted:
        _say(f"refused by node 0: {verdict.refusal}")
        exit_without_teardown(1)
    if params.storage == "node_local" and rank == 0 and params.node_rank != 0:
        # Its metrics and final weights would stay on this node's own disk, out of node 0's record.
        _say(f"storage='node_local': global rank 0 runs on node {params.node_rank}, not node 0 (torchrun's c10d "
             "orders nodes by host name and process id): its metrics and weights would never reach node 0's "
             "record; use storage='shared'")
        exit_without_teardown(1)
    return verdict.resume_path(spec["output_dir"])


def _ranks_here(world: int, params: Params) -> list[int]:
    """The ranks whose ZeRO states a checkpoint folder of this node holds: every rank in a shared
    folder; this node's own under node-local storage."""
    if params.storage != "node_local":
        return list(range(world))
    first = _rank() - _local_rank()
    return list(range(first, first + int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)))


def _load_model(spec: dict, params: Params):
    loaded = load_processor(spec["model_path"], trust_remote_code=params.trust_remote_code)
    for part in loaded.unavailable:
        _say(f"processor: {part}")
    model = load_model(spec["model_path"], attn_implementation=spec["attn_implementation"],
                       trust_remote_code=params.trust_remote_code, traits=loaded.traits)
    without_kv_cache(model)
    refusal = sdpa_refusal(model) if spec["attn_implementation"].startswith("hyport") else None
    if refusal:  # the plan refuses it first; this guards a spec made by hand
        raise UnsupportedAttentionArgument(f"hyport attention: {refusal}; use attn_implementation='eager'")
    if params.gradient_checkpointing:
        # A frozen embedding (LoRA) under checkpointing otherwise gives "element 0 of
        # tensors does not require grad".
        model.enable_input_require_grads()
    if params.finetuning_type == "lora":
        from transformers import set_seed

        set_seed(params.seed)  # the LoRA weights are drawn here, before the Trainer seeds
        model = _with_lora(model, params)
    return model, loaded


def _with_lora(model, params: Params):
    from peft import LoraConfig, get_peft_model

    targets = lora_target_pattern(language_model_path(model), params.lora_targets)
    return get_peft_model(model, LoraConfig(r=params.lora_rank, lora_alpha=params.lora_alpha, lora_dropout=0.0,
                                            target_modules=targets))


def without_kv_cache(model) -> None:
    """No KV cache in training, on the model's config and every sub-config: with one, transformers
    skips its packed-sequence mask on some families (a sliding-window mask over a whole packed row
    lets samples see each other; docs/attention_swap.md, "The proof before launch")."""
    configs = [model.config, *(getattr(model.config, key, None) for key in ("text_config", "llm_config"))]
    for config in configs:
        if config is not None and hasattr(config, "use_cache"):
            config.use_cache = False


def _dataset(spec: dict, params: Params, loaded, model):
    # The same file, format and layout as the plan read (dataset_info.json entries included).
    report = load_dataset(spec["dataset_path"], spec.get("image_root"), check_images=False,
                          options=params.dataset_options)
    skip = set(spec.get("skip_records") or [])
    positions = rope_positions_function(model) if params.packing else None
    encoder = Encoder(loaded, params.max_seq_len, params.overflow, positions=positions)
    samples = []
    for record in report.records:
        if record.index in skip:
            continue
        sample, problem = encoder.encode(record)
        if sample is not None:
            samples.append(sample)
    rows = training_rows(samples, params.max_seq_len, params.packing)
    collator = make_collator(encoder.pad_id, params.max_seq_len, params.packing,
                             mrope_text_row=loaded.traits.mrope_text_row)
    collator = FirstBatchRecorder(collator, loaded.tokenizer, first_batch_path(spec["output_dir"], _rank()),
                                  frozenset(encoder.image_token_ids))
    _say(f"dataset {report.path}: {report.layout.describe() if report.layout else 'no record read'}; "
         f"{len(report.records)} records, {len(samples)} samples, {len(rows)} rows")
    questions = {record.record_id: record.turns[0][1] for record in report.records if record.turns}
    return rows, collator, samples, questions


def _blank_image_inputs(loaded) -> Optional[dict]:
    """One blank image's tensors for ``CountingTrainer``; None for a text-only model."""
    image_processor = getattr(loaded.processor, "image_processor", None)
    if not loaded.traits.multimodal or image_processor is None:
        return None
    from PIL import Image

    out = image_processor(images=[Image.new("RGB", (64, 64))], return_tensors="pt")
    return {k: v for k, v in out.items() if hasattr(v, "shape")}


def _training_args(spec: dict, params: Params, backend):
    from transformers import TrainingArguments

    precision = spec["precision"]
    return TrainingArguments(
        output_dir=spec["output_dir"], run_name=params.run_name,
        use_cpu=backend.kind == "cpu", deepspeed=spec["deepspeed_config_path"],
        bf16=precision == "bf16", fp16=precision == "fp16",
        per_device_train_batch_size=params.per_device_train_batch_size,
        gradient_accumulation_steps=params.gradient_accumulation_steps,
        max_steps=params.max_steps if params.max_steps is not None else -1,
        num_train_epochs=params.num_train_epochs, learning_rate=params.learning_rate,
        lr_scheduler_type=params.lr_scheduler_type, warmup_steps=params.warmup_steps,
        logging_steps=1, save_strategy="steps",
        save_steps=params.save_steps, gradient_checkpointing=params.gradient_checkpointing,
        report_to="none", dataloader_num_workers=0, remove_unused_columns=False,
        disable_tqdm=True, seed=params.seed, ddp_timeout=int(params.collective_timeout_s),
        # node-local storage: each node's first process writes the Trainer's files too
        save_on_each_node=params.storage == "node_local")


def save_final(trainer, processor, spec: dict, params: Params) -> str:
    """Final weights in ``output_dir`` (the seed's layout); LoRA: merged, adapter beside."""
    out = Path(spec["output_dir"])
    state_dict = trainer.accelerator.get_state_dict(trainer.deepspeed or trainer.model)  # ZeRO-3: gathers
    if not trainer.is_world_process_zero():
        return str(out)
    model = trainer.accelerator.unwrap_model(trainer.model)
    retie(model, state_dict)  # copies hide ties from save_pretrained: a tied weight saved twice
    sharding = {"max_shard_size": params.shard_size} if params.shard_size else {}
    if params.finetuning_type == "lora":
        model.save_pretrained(str(out / "adapter"), state_dict=state_dict)
        with _zero3_set_aside():  # a plain model on rank 0 alone: no ZeRO-3 gathering
            merged = _merged_lora(spec, params, state_dict)
        merged.save_pretrained(str(out), **sharding)
    else:
        model.save_pretrained(str(out), state_dict=state_dict, safe_serialization=True, **sharding)
        if params.zero_stage == 3:
            _count_saved_parameters(out)
    processor.save_pretrained(str(out))
    return str(out)


@contextlib.contextmanager
def _zero3_set_aside():
    """transformers believes ZeRO-3 is on for as long as the Trainer's DeepSpeed config
    lives: a ``from_pretrained`` on rank 0 alone would then partition the model and wait
    for the other ranks for ever. Set it aside for a model built on one rank."""
    import transformers.integrations.deepspeed as hf_deepspeed

    saved = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved


def _count_saved_parameters(out: Path) -> None:
    """Under ZeRO-3 ``save_pretrained`` counts the rank's partitions (almost nothing) into
    the index's ``metadata.total_parameters``; count what the shards hold instead."""
    index_path = out / "model.safetensors.index.json"
    if not index_path.is_file():
        return
    index = json.loads(index_path.read_text(encoding="utf-8"))
    if "total_parameters" not in (index.get("metadata") or {}):
        return
    shards = [read_header(out / name, validate=False) for name in sorted(set(index["weight_map"].values()))]
    index["metadata"]["total_parameters"] = sum(e.numel for s in shards for e in s.tensors.values())
    atomic_write_json(index_path, index)


def _merged_lora(spec: dict, params: Params, state_dict: dict):
    """A fresh base model on the CPU with the trained LoRA weights merged in."""
    wrapped = _with_lora(load_model(spec["model_path"], trust_remote_code=params.trust_remote_code), params)
    # Only the trained LoRA weights: the frozen base stays as it was loaded, not as the
    # (possibly bf16) copy DeepSpeed trained with.
    trained = {k: v.float() for k, v in state_dict.items() if "lora_" in k}
    missing, unexpected = wrapped.load_state_dict(trained, strict=False)
    lora_missing = [k for k in missing if "lora_" in k]
    if lora_missing or unexpected or not trained:
        raise RuntimeError(f"merging LoRA: {len(trained)} LoRA weights saved, {len(lora_missing)} "
                           f"missing, {len(unexpected)} unexpected (e.g. {(lora_missing + unexpected)[:2]})")
    return wrapped.merge_and_unload()


def run(spec: dict) -> WorkerResult:
    started = time.monotonic()
    params = Params.trusted(spec["params"])
    backend = get_backend(spec["device_kind"])
    _quiet_deepspeed_cpu(backend)
    planned = node_handshake(spec, params) if params.nnodes > 1 else spec["resume_checkpoint"]
    init_distributed(backend, params.collective_timeout_s)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    # After a fault, torchrun's restart resumes this launch's newest complete checkpoint,
    # whatever the plan resolved for the first attempt.
    resume_from = "auto" if restart and newest_complete(spec["output_dir"]) else planned or "none"
    checkpoint = resolve_resume(resume_from, spec["output_dir"])
    if checkpoint is not None:
        check_compatible(checkpoint, world_size=world, zero_stage=params.zero_stage,
                         finetuning_type=params.finetuning_type)
    step = checkpoint.step if checkpoint else 0
    if _rank() == 0:
        kept = truncate_metrics(spec["metrics_path"], step)
        dropped = drop_checkpoints_after(spec["output_dir"], step)
        _say(f"world {world}, restart {restart}, resume from "
             f"{checkpoint.path if checkpoint else 'scratch'} ({kept} metric lines kept"
             + (f"; removed {', '.join(dropped)}: later than the resume point" if dropped else "")
             + ")")
    barrier()
    if spec["attn_implementation"].startswith("hyport"):
        register_hyport_attention(spec["attention_backend"], spec["attn_implementation"])
    model, loaded = _load_model(spec, params)
    processor = loaded.processor
    rows, collator, samples, questions = _dataset(spec, params, loaded, model)
    held = held_prompts(samples, loaded.tokenizer, questions)
    if _rank() == 0:  # what the starting model answers, beside what it will say after training
        if backend.is_accelerator and params.zero_stage < 3:  # the Trainer would move it there anyway
            model.to(backend.device(_local_rank()))
        answer(held, model, loaded.tokenizer, spec["model_path"], params.zero_stage, "before")
    counts = StepCounts()
    metrics = MetricsCallback(spec["metrics_path"], backend, counts, marker={
        "world_size": world, "zero_stage": params.zero_stage,
        "finetuning_type": params.finetuning_type,
        "extra": {"storage": params.storage, "ranks": _ranks_here(world, params)}})
    trainer = CountingTrainer(model=model, args=_training_args(spec, params, backend),
                              train_dataset=rows, data_collator=collator,
                              processing_class=processor, callbacks=[metrics], step_counts=counts,
                              # ZeRO-3 hangs on the blank image: preflight refuses mixed data there.
                              dummy_image_inputs=_blank_image_inputs(loaded) if params.zero_stage < 3 else None)
    metrics.trainer = trainer
    output = trainer.train(resume_from_checkpoint=str(checkpoint.path) if checkpoint else None)
    before = mark_final_save_start(Path(spec["output_dir"])) if trainer.is_world_process_zero() else []
    final = save_final(trainer, processor, spec, params)
    if trainer.is_world_process_zero():
        write_run_marker(Path(spec["output_dir"]), before)
        answer(held, trainer.accelerator.unwrap_model(trainer.model), loaded.tokenizer, spec["model_path"],
               params.zero_stage, "after")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return WorkerResult(
        status="ok", train_metrics=dict(output.metrics), global_step=trainer.state.global_step,
        final_dir=final, resumed_from=str(checkpoint.path) if checkpoint else None, resumed_step=step,
        world_size=world, samples=len(samples), rows=len(rows), trainable_parameters=int(trainable),
        restart=restart, held_answers=held, worker_s=round(time.monotonic() - started, 3))


def main() -> int:
    guard = start_guard()
    spec = load_spec()
    # "host: NAME" on a line of its own: hyport triage names each node of a job by it
    _say(f"pid {os.getpid()} local rank {os.environ.get('LOCAL_RANK')} guard {guard}")
    _say(f"host: {socket.gethostname()}")
    result = run(spec)
    if _rank() == 0:
        atomic_write_json(Path(spec["output_dir"]) / RESULT_FILE, scrub_obj(to_mapping(result)))
    group = process_group()
    if group:
        group.barrier()
        group.destroy_process_group()
    _say("done")
    # About 1 run in 12 aborted in the interpreter's teardown after a good run
    # ("terminate called without an active exception"), and torchrun then reports the
    # job failed: everything is written, so leave without the teardown.
    exit_without_teardown(0)


if __name__ == "__main__":
    sys.exit(main())
