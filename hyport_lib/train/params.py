"""Stage 04's parameters: every knob of the smoke training, declared once (notebook 04's
``parameters`` cell, ``hyport train``'s flags, ``hyport report -p``). The names follow the seed's
training script and LLaMA-Factory's YAML where they exist.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hyport_lib.models.tiny import is_tiny_model
from hyport_lib.nodes.handshake import STORAGE_CHOICES
from hyport_lib.npu_attention.runnable import attention_offered
from hyport_lib.params import (ParameterError, StageParams, attn_implementation_param, card_memory_param,
                               device_param, model_path_param, nodes_from_param, num_cards_param, param,
                               trust_remote_code_param)
from hyport_lib.train.dataset_formats import FORMAT_CHOICES, DatasetOptions, option_problems
from hyport_lib.train.dataset_info import INFO_FILE

#: Sample data of every format this stage reads (docs/datasets.md), shipped with hyport:
#: the workbook's form offers them.
SAMPLE_DATASETS = Path(__file__).resolve().parent / "sample_datasets"
#: The schedules that need no ``lr_scheduler_kwargs`` (cosine_with_min_lr and
#: warmup_stable_decay need some) and no evaluation loop (reduce_lr_on_plateau): the
#: Trainer gets neither, so the others would fail only after every rank loaded the model.
#: ``max_shard_size`` decided by the model (:attr:`Params.shard_size`).
AUTO = "auto"
#: What ``auto`` gives any model but the tiny one: the seed's final weights (3.8 B parameters
#: in bfloat16) came in two shards of at most 5GB (transformers 4's default; 5 writes 50GB).
AUTO_SHARD_SIZE = "5GB"
#: What ``auto`` gives the embedded tiny model (a few MB): several shards and an index, so
#: that stage 05 checks a sharded checkpoint in every default run.
TINY_MODEL_SHARD_SIZE = "300KB"
LR_SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                 "constant_with_warmup", "inverse_sqrt")


@dataclass
class Params(StageParams):
    """What stage 04 trains and how (each field's doc is its line in notebook 04's
    ``parameters`` cell; the rules across fields are :meth:`check`'s)."""

    device: str = device_param()
    num_cards: Optional[int] = num_cards_param("processes per node; None: every visible card (CPU: 2 processes)")
    card_memory_gib: Optional[float] = card_memory_param(group="DeepSpeed / memory")
    model_path: str = model_path_param()
    # (must exist: checked in check(), where a folder is accepted only with dataset)
    dataset_path: str = param("", 'a data file (JSON, JSON Lines, parquet), or a LLaMA-Factory dataset_info.json '
                              '(or its folder) with dataset; "": the bundled 14-record smoke set', path="any",
                              presets=tuple(sorted(str(p) for p in SAMPLE_DATASETS.iterdir())))
    dataset: Optional[str] = param(None, "the dataset_info.json entry to train on (dataset_path names the json); "
                                   "None: dataset_path is the data file", nonempty=True)
    dataset_format: str = param("auto", "auto (detected from the first record whose keys tell it) | alpaca | "
                                "sharegpt | openai", choices=FORMAT_CHOICES, group="Data")
    dataset_columns: dict = param({}, "column names overriding the format's, as dataset_info.json's columns "
                                  "(prompt, query, response, history, system, messages, images, id; None, "
                                  "null in YAML and on the command line: not read)", group="Data")
    dataset_tags: dict = param({}, "role tags overriding the format's, as dataset_info.json's tags (role_tag, "
                               "content_tag, user_tag, assistant_tag, system_tag)", group="Data")
    image_root: Optional[str] = param(None, "folder image paths are relative to; None: the data file's folder (a "
                                      "dataset_info.json entry: the json's folder)",
                                      nonempty=True, path="dir", must_exist=True, group="Data")
    output_dir: Optional[str] = param(None, "checkpoints, final weights, metrics; None: <run folder>/train/"
                                      "<run_name> (a new folder per run)", nonempty=True, path="dir", output=True)
    run_name: str = param("smoke", "a label for the run (the seed's RUN_NAME); names the default output_dir",
                          nonempty=True, group="Training")
    max_steps: Optional[int] = param(20, "optimizer steps; None: full epochs (the seed's original "
                                     "configuration)", min=1)
    num_train_epochs: float = param(1.0, "epochs, used when max_steps is None", min_exclusive=0, group="Training")
    save_steps: int = param(100000, "a checkpoint every N steps (the seed's 100000: only the final weights)",
                            min=1, group="Training")
    learning_rate: float = param(1e-4, "peak learning rate", min_exclusive=0)
    lr_scheduler_type: str = param("cosine", "learning-rate schedule (transformers' SchedulerType)",
                                   choices=LR_SCHEDULERS, group="Training")
    warmup_steps: int = param(0, "steps of learning-rate warm-up", min=0, group="Training")
    per_device_train_batch_size: int = param(1, "rows per process and micro-batch (the seed's 1)", min=1,
                                             group="Training")
    gradient_accumulation_steps: int = param(1, "micro-batches per optimizer step (the seed's 1)", min=1,
                                             group="Training")
    max_seq_len: int = param(512, "tokens per sample and per packed row (LLaMA-Factory's cutoff_len)", min=16,
                             group="Data")
    packing: bool = param(True, "several samples per row, attention kept per sample; False: one padded "
                          "sample per row", group="Data")
    overflow: str = param("truncate", "a sample longer than max_seq_len: truncate | drop",
                          choices=("truncate", "drop"), group="Data")
    skip_bad_records: bool = param(False, "False: stop before launching and list every problem; True: skip "
                                   "the bad records", group="Data")
    zero_stage: int = param(2, "DeepSpeed ZeRO stage: 0 | 2 | 3", choices=(0, 2, 3))
    offload_optimizer: bool = param(False, "ZeRO's optimizer state on the host (zero_stage 2 or 3)",
                                    group="DeepSpeed / memory")
    deepspeed_config: Optional[str] = param(None, "a DeepSpeed JSON of your own; None: "
                                            "parameters/deepspeed/zero<stage>.json",
                                            nonempty=True, path="file", must_exist=True, group="DeepSpeed / memory")
    finetuning_type: str = param("full", "full | lora", choices=("full", "lora"))
    lora_rank: int = param(8, "LoRA rank", min=1, group="LoRA")
    lora_alpha: int = param(16, "LoRA alpha", min=1, group="LoRA")
    lora_target: str = param("q_proj,v_proj", 'LoRA target modules, comma-separated, or "all" (every linear '
                             'layer of the language model)', nonempty=True, presets=("q_proj,v_proj", "all"),
                             group="LoRA")
    precision: str = param("auto", "auto (bf16 where supported, else fp32) | bf16 | fp16 | fp32",
                           choices=("auto", "bf16", "fp16", "fp32"), group="Training")
    loss_scale: float = param(0.0, "fp16's static loss scale (precision fp16 only); 0: dynamic", min=0,
                              group="Training")
    gradient_checkpointing: bool = param(True, "recompute activations in the backward pass (less memory)",
                                         group="DeepSpeed / memory")
    attn_implementation: str = attn_implementation_param(
        attention_offered, doc="attention of unpacked runs (auto: eager); packed runs use hyport's")
    nodes_from: Optional[str] = nodes_from_param()
    nnodes: int = param(1, "torchrun nodes", min=1, group="Several hosts")
    node_rank: int = param(0, "this node's rank, 0 .. nnodes-1", min=0, group="Several hosts")
    master_addr: str = param("127.0.0.1", "the rendezvous address (node 0's)", nonempty=True, group="Several hosts")
    master_port: int = param(0, "the rendezvous port; 0: a free one (one node only)", min=0, max=65535,
                             group="Several hosts")
    rdzv_id: Optional[str] = param(None, "the job's rendezvous id, the same on every node (LLaMA-Factory's RDZV_ID); "
                                   "None: derived from run_name and master_port", nonempty=True, group="Several hosts")
    join_timeout_s: float = param(300.0, "seconds every node has to join the rendezvous (nnodes > 1)",
                                  min_exclusive=0, group="Several hosts")
    node_timeout_s: float = param(120.0, "a node whose heartbeat is silent this long is named and the job "
                                  "stopped (nnodes > 1)", min_exclusive=0, group="Several hosts")
    collective_timeout_s: float = param(1800.0, "the process group's timeout of one collective (torch's "
                                        "init_process_group timeout, the Trainer's ddp_timeout)", min_exclusive=0,
                                        group="Several hosts")
    storage: str = param("shared", "shared: output_dir is one folder every node sees (node 0's token must be "
                         "there) | node_local: each node its own, DeepSpeed's node-local checkpoints",
                         choices=STORAGE_CHOICES, group="Several hosts")
    max_restarts: int = param(0, "torchrun restarts the workers this often after a failure (they resume)", min=0,
                              group="Several hosts")
    resume_from: str = param("auto", "auto (newest complete checkpoint in output_dir) | none | a checkpoint-N "
                             "folder", nonempty=True, path="dir", not_paths=("auto", "none"),
                             presets=("auto", "none"), group="Training")
    overwrite_output_dir: bool = param(False, "True: allow a folder with files hyport did not write", group="Training")
    throughput_warmup_steps: int = param(2, "first steps left out of the throughput figures (operator "
                                         "compilation)", min=0, group="Advanced")
    train_timeout_s: float = param(3600.0, "wall-clock limit of the whole launch, in seconds", min_exclusive=0,
                                   group="Advanced")
    max_shard_size: Optional[str] = param(AUTO, f"the final weights' shard size: auto ({AUTO_SHARD_SIZE}, the seed's "
                                          f"two shards; the embedded tiny model {TINY_MODEL_SHARD_SIZE}, so that "
                                          "it too comes in shards with an index) | a size such as 5GB, for any "
                                          "model | None: transformers' default", nonempty=True, presets=(AUTO,),
                                          group="Training")
    trust_remote_code: bool = trust_remote_code_param()
    seed: int = param(0, "seeds the data order and new (LoRA) weights", min=0, group="Training")

    def check(self) -> None:
        """The rules across fields, and the single-field ones a spec cannot say."""
        problems = []
        if "/" in self.run_name:
            problems.append(f"run_name={self.run_name!r}: a name without '/' (it names a folder)")
        if self.node_rank >= self.nnodes:
            problems.append(f"node_rank={self.node_rank}: must be below nnodes={self.nnodes}")
        if self.master_port == 0 and self.nnodes > 1:
            problems.append(f"master_port=0: with nnodes={self.nnodes} give every node the same "
                            "master_port (e.g. 29500)")
        if self.offload_optimizer and self.zero_stage == 0:
            problems.append("offload_optimizer=True: needs zero_stage 2 or 3 (zero_stage=0)")
        if self.loss_scale and self.precision != "fp16":
            # DeepSpeed reads a loss scale only for fp16: elsewhere it would be silently ignored.
            problems.append(f"loss_scale={self.loss_scale:g}: a loss scale applies to precision='fp16' only "
                            f"(precision={self.precision!r}); leave it 0")
        problems.extend(self._dataset_problems())
        if not self.lora_targets:
            problems.append(f"lora_target={self.lora_target!r}: names no module")
        if self.max_shard_size not in (None, AUTO):
            problems.extend(_shard_size_problems(self.max_shard_size))
        if problems:
            raise ParameterError(problems)

    def _dataset_problems(self) -> list[str]:
        problems = option_problems(self.dataset_format, self.dataset_columns, self.dataset_tags, self.dataset)
        path = Path(self.dataset_path).expanduser() if self.dataset_path else None
        # os.path, not Path: a path the system will not look up (permission denied, a name
        # too long) is no such file, as Field.check_exists says it, never an OSError
        if path is not None and not os.path.exists(path):
            problems.append(f"dataset_path={self.dataset_path!r}: no such file")
        elif path is not None and os.path.isdir(path) and self.dataset is None:
            problems.append(f"dataset_path={self.dataset_path!r} is a folder: give the data file itself (JSON, "
                            "JSON Lines or parquet), or name an entry of the folder's dataset_info.json with dataset")
        elif path is not None and os.path.isdir(path) and not os.path.isfile(path / INFO_FILE):
            problems.append(f"dataset_path={self.dataset_path!r}: a folder without a {INFO_FILE} (dataset="
                            f"{self.dataset!r} names an entry of one)")
        elif path is not None and not os.path.isdir(path) and not os.path.isfile(path):
            problems.append(f"dataset_path={self.dataset_path!r}: not a regular file (a pipe, device or socket)")
        if self.dataset is not None and path is None:
            problems.append(f"dataset={self.dataset!r}: names an entry of a dataset_info.json; give that file "
                            "(or its folder) as dataset_path")
        elif self.dataset is None and path is not None and path.name == "dataset_info.json":
            problems.append(f"dataset_path={self.dataset_path!r} is a dataset_info.json: name the entry to "
                            "train on with dataset=NAME")
        if not self.dataset_path and (self.dataset_format != "auto" or self.dataset_columns or self.dataset_tags):
            problems.append("dataset_format / dataset_columns / dataset_tags: they describe a dataset_path; the "
                            "bundled smoke set needs none")
        return problems

    @property
    def dataset_options(self) -> DatasetOptions:
        """How :func:`hyport_lib.train.dataset.load_dataset` reads ``dataset_path``."""
        return DatasetOptions(self.dataset_format, dict(self.dataset_columns), dict(self.dataset_tags),
                              self.dataset)

    @property
    def shard_size(self) -> Optional[str]:
        """``max_shard_size`` as the final save gets it (None: transformers' default): ``auto``
        gives the tiny model's small shards to the tiny model only (by name or by its folder), a
        real model never 200 of them."""
        if self.max_shard_size != AUTO:
            return self.max_shard_size
        return TINY_MODEL_SHARD_SIZE if is_tiny_model(self.model_path) else AUTO_SHARD_SIZE

    def shard_size_note(self) -> str:
        """What :attr:`shard_size` decided, and why, for the plan's notes."""
        size = self.shard_size
        if self.max_shard_size != AUTO:
            chosen = f"shards of at most {size}" if size else "transformers' default shard size"
            return f"final weights: {chosen} (max_shard_size={self.max_shard_size!r})"
        why = ("the embedded tiny model, split so that its final weights come with an index to check"
               if size == TINY_MODEL_SHARD_SIZE else "the seed's shard size")
        return f"final weights: shards of at most {size} (max_shard_size='auto': {why})"

    @property
    def lora_targets(self) -> list[str]:
        """``lora_target`` as a list of module names (``["all"]`` for every linear layer)."""
        return [t.strip() for t in self.lora_target.split(",") if t.strip()]


def _shard_size_problems(value: str) -> list[str]:
    # The final save would fail only after the last step: check the size before anything starts.
    from transformers.utils.hub import convert_file_size_to_int

    try:
        size = convert_file_size_to_int(value)
    except ValueError:
        return [f"max_shard_size={value!r}: expected a size such as 5GB, 500MB or 300KB"]
    if size <= 0:
        return [f"max_shard_size={value!r}: must be a positive size"]
    return []
