"""What stage 04 trains and how: :class:`TrainConfig`, checked before anything starts.

The names follow the seed's training script and LLaMA-Factory's YAML where they
exist (``max_steps``, ``save_steps``, ``per_device_train_batch_size``,
``gradient_accumulation_steps``, ``learning_rate``, ``finetuning_type``,
``lora_rank`` / ``lora_alpha`` / ``lora_target``, ``packing``, ``output_dir``,
``run_name``). As in the seed's script, the environment variables ``MAX_STEPS`` and
``SAVE_STEPS`` override the parameters (``MAX_STEPS=20 SAVE_STEPS=20`` for a short
check), and the result records that they did.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Mapping, Optional

from hyport_lib.utils.values import as_flag, as_float, as_int, from_known_keys

ZERO_STAGES = (0, 2, 3)
FINETUNING_TYPES = ("full", "lora")
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
OVERFLOW_MODES = ("truncate", "drop")
#: Environment overrides, as the seed's script reads them.
ENV_OVERRIDES = {"MAX_STEPS": "max_steps", "SAVE_STEPS": "save_steps"}


@dataclass
class TrainConfig:
    """Every knob of the smoke training (see the module docstring).

    Attributes:
        model_path: ``tiny`` (the embedded model) or a checkpoint folder.
        dataset_path: JSON / JSON Lines file in the seed's format; empty: the bundled
            14-record smoke set.
        image_root: folder the records' image paths are relative to (default: the
            dataset file's folder).
        output_dir: where ``checkpoint-N/``, the final weights and the metrics go;
            empty: ``<results>/../train/<run_name>``.
        run_name: a label for the run (the seed's ``RUN_NAME``).
        max_steps: optimizer steps; None trains full epochs (the seed's original
            configuration); ``MAX_STEPS`` overrides it.
        num_train_epochs: epochs when ``max_steps`` is None.
        save_steps: a checkpoint every N steps (the seed's default 100000: effectively
            only the final weights); ``SAVE_STEPS`` overrides it.
        per_device_train_batch_size / gradient_accumulation_steps: the seed's 1 / 1.
        learning_rate: peak learning rate; ``lr_scheduler_type`` and ``warmup_steps``
            shape it.
        max_seq_len: tokens per sample (and per packed row); LLaMA-Factory's
            ``cutoff_len``.
        packing: several samples per row with per-sample attention (see
            :mod:`hyport_lib.train.packing`); False pads one sample per row.
        overflow: a sample longer than ``max_seq_len``: ``truncate`` or ``drop``.
        skip_bad_records: False stops before launching and lists every problem; True
            skips the bad records and reports how many.
        zero_stage: DeepSpeed ZeRO stage 0, 2 (the seed's) or 3.
        offload_optimizer: ZeRO's optimizer state on the host (stage 2 / 3).
        deepspeed_config: a DeepSpeed JSON of your own instead of the bundled
            ``parameters/deepspeed/zero<stage>.json``.
        finetuning_type: ``full`` or ``lora`` (through peft).
        lora_rank / lora_alpha / lora_target: LoRA's rank, alpha and target modules
            (comma-separated names, or ``all`` for every linear layer of the language
            model).
        precision: ``auto`` (bf16 where the backend has it, else fp32), ``bf16``,
            ``fp16`` (with a dynamic loss scale, or ``loss_scale``) or ``fp32``.
        loss_scale: fp16's static loss scale; 0 = dynamic (DeepSpeed's default).
        gradient_checkpointing: recompute activations in the backward pass.
        attn_implementation: the attention of a padded (``packing=False``) run;
            packed runs always use hyport's registered attention: it keeps the samples
            apart in every case (transformers' eager and sdpa only while no KV cache is
            in use) and runs them as TND ``npu_fusion_attention`` on an NPU.
        device: ``auto``, ``npu``, ``cuda`` or ``cpu``.
        num_cards: processes per node (``nproc_per_node``); None: every visible card
            (2 processes on CPU).
        nnodes / node_rank / master_addr / master_port: the torchrun rendezvous;
            ``master_port`` 0 picks a free port.
        max_restarts: torchrun restarts all workers this often after a failure; they
            resume from the newest complete checkpoint.
        resume_from: ``auto`` (newest complete checkpoint in ``output_dir``), ``none``
            or a checkpoint folder.
        overwrite_output_dir: allow a run into a folder holding entries hyport did not
            write, and dropping the checkpoints after an older ``resume_from``; off, both
            stop the run before launch, named (see :mod:`hyport_lib.train.ownership`).
        throughput_warmup_steps: first steps left out of the throughput figures (the
            first steps compile operators on an NPU).
        train_timeout_s: wall-clock limit of the whole launch.
        seed: seeds data order and initialisation of new (LoRA) weights.
        trust_remote_code: allow the checkpoint's own Python code.
        max_shard_size: shard the final weights; ``"5GB"`` (transformers 4.x's default,
            which gave the seed its two shards and an index); ``"300KB"`` shards the tiny
            model; None: the installed transformers' default.
    """

    model_path: str = "tiny"
    dataset_path: str = ""
    image_root: Optional[str] = None
    output_dir: str = ""
    run_name: str = "smoke"
    max_steps: Optional[int] = 20
    num_train_epochs: float = 1.0
    save_steps: int = 100000
    per_device_train_batch_size: int = 1
    gradient_accumulation_steps: int = 1
    learning_rate: float = 1e-4
    lr_scheduler_type: str = "cosine"
    warmup_steps: int = 0
    max_seq_len: int = 512
    packing: bool = True
    overflow: str = "truncate"
    skip_bad_records: bool = False
    zero_stage: int = 2
    offload_optimizer: bool = False
    deepspeed_config: Optional[str] = None
    finetuning_type: str = "full"
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_target: str = "q_proj,v_proj"
    precision: str = "auto"
    loss_scale: float = 0.0
    gradient_checkpointing: bool = True
    attn_implementation: str = "eager"
    device: str = "auto"
    num_cards: Optional[int] = None
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    max_restarts: int = 0
    resume_from: str = "auto"
    overwrite_output_dir: bool = False
    throughput_warmup_steps: int = 2
    train_timeout_s: float = 3600.0
    seed: int = 0
    trust_remote_code: bool = False
    max_shard_size: Optional[str] = "5GB"
    env_overrides: dict = field(default_factory=dict)  # filled by with_env_overrides

    def __post_init__(self) -> None:
        if self.max_steps is not None:
            self.max_steps = _positive("max_steps", self.max_steps)
        self.save_steps = _positive("save_steps", self.save_steps)
        self.num_train_epochs = as_float("num_train_epochs", self.num_train_epochs)
        if self.num_train_epochs <= 0:
            raise ValueError(f"num_train_epochs={self.num_train_epochs!r}: must be > 0")
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "lora_rank",
                     "lora_alpha", "nnodes"):
            setattr(self, name, _positive(name, getattr(self, name)))
        for name in ("warmup_steps", "node_rank", "master_port", "max_restarts",
                     "throughput_warmup_steps", "seed"):
            value = as_int(name, getattr(self, name))
            if value < 0:
                raise ValueError(f"{name}={value!r}: must be >= 0")
            setattr(self, name, value)
        self.max_seq_len = as_int("max_seq_len", self.max_seq_len)
        if self.max_seq_len < 16:
            raise ValueError(f"max_seq_len={self.max_seq_len!r}: must be at least 16")
        if self.num_cards is not None:
            self.num_cards = _positive("num_cards", self.num_cards)
        self.zero_stage = as_int("zero_stage", self.zero_stage)
        _choice("zero_stage", self.zero_stage, ZERO_STAGES)
        _choice("finetuning_type", self.finetuning_type, FINETUNING_TYPES)
        _choice("precision", self.precision, PRECISIONS)
        _choice("overflow", self.overflow, OVERFLOW_MODES)
        self.learning_rate = as_float("learning_rate", self.learning_rate)
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate={self.learning_rate!r}: must be > 0")
        if self.master_port > 65535:
            raise ValueError(f"master_port={self.master_port!r}: a TCP port is 0..65535 (0: a free one)")
        self.loss_scale = as_float("loss_scale", self.loss_scale)
        if not self.loss_scale >= 0 or self.loss_scale == float("inf"):
            raise ValueError(f"loss_scale={self.loss_scale!r}: a finite number >= 0 (0: dynamic)")
        self.train_timeout_s = as_float("train_timeout_s", self.train_timeout_s)
        if self.train_timeout_s <= 0:
            raise ValueError(f"train_timeout_s={self.train_timeout_s!r}: must be > 0 seconds")
        for name in ("packing", "skip_bad_records", "overwrite_output_dir", "offload_optimizer", "gradient_checkpointing",
                     "trust_remote_code"):
            setattr(self, name, as_flag(name, getattr(self, name)))
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank={self.node_rank}: must be below nnodes={self.nnodes}")
        if self.offload_optimizer and self.zero_stage == 0:
            raise ValueError("offload_optimizer=True needs zero_stage 2 or 3")
        if not str(self.run_name).strip() or "/" in str(self.run_name):
            raise ValueError(f"run_name={self.run_name!r}: a non-empty name without '/'")
        if not str(self.resume_from).strip():
            raise ValueError("resume_from: 'auto', 'none' or a checkpoint folder")
        _check_scheduler(self.lr_scheduler_type)
        if self.max_shard_size not in (None, ""):
            _check_shard_size(self.max_shard_size)

    def with_env_overrides(self, environ: Optional[Mapping[str, str]] = None) -> "TrainConfig":
        """A copy with ``MAX_STEPS`` / ``SAVE_STEPS`` applied (as the seed's script does)."""
        environ = os.environ if environ is None else environ
        data = self.to_dict()
        applied = {}
        for var, name in ENV_OVERRIDES.items():
            raw = environ.get(var)
            if raw is not None and raw.strip():
                data[name] = _positive(f"{var} (environment)", raw)
                applied[var] = data[name]
        data["env_overrides"] = applied
        return TrainConfig(**data)

    @property
    def lora_targets(self) -> list[str]:
        return [t.strip() for t in str(self.lora_target).split(",") if t.strip()]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> "TrainConfig":
        return from_known_keys(cls, data)


def _positive(name: str, value) -> int:
    number = as_int(name, value)
    if number < 1:
        raise ValueError(f"{name}={value!r}: must be at least 1")
    return number


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r}: expected one of {', '.join(map(str, allowed))}")


def _check_scheduler(name) -> None:
    # Checked here, not after torchrun has started and every rank has loaded the model.
    # The schedules that need no lr_scheduler_kwargs (cosine_with_min_lr, warmup_stable_decay
    # need some) and no evaluation loop (reduce_lr_on_plateau): TrainConfig passes neither.
    allowed = ["linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
               "constant_with_warmup", "inverse_sqrt"]
    if name not in allowed:
        raise ValueError(f"lr_scheduler_type={name!r}: expected one of {', '.join(allowed)}")


def _check_shard_size(value) -> None:
    # The final save would fail only after the last step: check the size before launching.
    from transformers.utils.hub import convert_file_size_to_int

    try:
        size = convert_file_size_to_int(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"max_shard_size={value!r}: expected a size such as 5GB or 500MB "
                         f"({exc})") from None
    if size <= 0:
        raise ValueError(f"max_shard_size={value!r}: must be a positive size")
