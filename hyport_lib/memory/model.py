"""One memory model for every stage (docs/memory.md): what a rank holds on its card and on
its host, item by item, from a checkpoint's shape (:mod:`.shape`) and the run's settings.

The figures are estimates made before anything loads, and say how they were made. The
training states follow DeepSpeed's own accounting (its ``estimate_zero*_model_states_mem_needs``,
which ``bench/memory_model.py`` checks against): a mixed-precision rank keeps 16-bit
weights and gradients, and fp32 gradients, master weights and two Adam moments, the last
three split over the ranks from ZeRO-1 on, the gradients from ZeRO-2 on, the weights at
ZeRO-3 (which then gathers one whole module at a time).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hyport_lib.memory.shape import STORED_DTYPES, ModelShape, format_gib
from hyport_lib.utils.wording import counted

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: The words users write for a dtype or a precision, and the dtype each means.
DTYPE_NAMES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
               "fp16": "float16", "float16": "float16"}

#: Bytes per parameter of the fp32 states a mixed-precision optimizer step keeps: gradients
#: accumulated in fp32, the master weights, Adam's two moments (DeepSpeed's 4 + 4 + 8).
FP32_GRADIENT, MASTER, ADAM = 4, 4, 8
#: DeepSpeed's ``additional_buffer_factor``: the pinned buffers beside offloaded states.
OFFLOAD_BUFFER_FACTOR = 1.5
#: Host bytes of a rank besides the model: Python, torch, transformers; on an accelerator
#: also the runtime's host side (CANN, CUDA).
HOST_RUNTIME = {"npu": 3 * 2 ** 30, "cuda": 3 * 2 ** 30, "cpu": 1 * 2 ** 30}
#: Card bytes the runtime takes before a tensor is made, and what the caching allocator
#: loses to fragmentation: a margin stated as such, not measured here. On an NPU, CANN's
#: context, operator workspace and HCCL's buffers (HCCL_BUFFSIZE, 200 MB a link by default).
CARD_RUNTIME_MARGIN = {"npu": 3 * 2 ** 30, "cuda": 2 * 2 ** 30, "cpu": 0}
#: A CPU training rank's DeepSpeed buffers beside the states (its flat copies while
#: partitioning): measured on SmolLM2-135M (docs/memory.md).
CPU_TRAINING_BUFFERS = 1 * 2 ** 30
#: The linear layers LoRA's "all" adapts in a decoder layer: (inputs, outputs) in shape units.
LORA_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

STAGES = ("training", "inference", "model check", "reload")


@dataclass(frozen=True)
class Workload:
    """What a stage runs, as the memory model needs it. ``world_size``: ranks in all;
    ``ranks_per_host``: the processes on one host (cards of a node, or CPU workers)."""

    stage: str  # one of STAGES
    kind: str  # npu | cuda | cpu
    dtype: str  # what the weights are held and computed in (a training's 16-bit copy)
    world_size: int = 1
    ranks_per_host: int = 1
    # training
    finetuning: str = "full"  # full | lora
    zero_stage: int = 0
    offload_optimizer: bool = False
    offload_params: bool = False
    lora_rank: int = 8
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    sequence: int = 2048
    micro_batch: int = 1
    gradient_checkpointing: bool = False
    eager_attention: bool = False  # attention scores materialised (eager) rather than fused
    # inference
    new_tokens: int = 0
    #: models a rank holds at once (the logits-parity check compares two)
    copies: int = 1
    #: a fixed amount on the rank's host beside the model (stage 02's shrunk proof model)
    extra_host_bytes: int = 0

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"stage={self.stage!r}: expected one of {', '.join(STAGES)}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype={self.dtype!r}: expected one of {', '.join(DTYPE_BYTES)}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage={self.zero_stage!r}: expected 0, 1, 2 or 3")
        if self.finetuning not in ("full", "lora"):
            raise ValueError(f"finetuning={self.finetuning!r}: expected full or lora")

    @property
    def width(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def describe(self) -> str:
        """``ZeRO-2, bf16, seq 2048, micro-batch 1``: what the figure depends on."""
        short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[self.dtype]
        if self.stage != "training":
            tail = f", {self.new_tokens} new tokens" if self.new_tokens else ""
            copies = f", {self.copies} copies" if self.copies > 1 else ""
            return f"{self.stage}, {short}, seq {self.sequence}, batch {self.micro_batch}{tail}{copies}"
        parts = [f"ZeRO-{self.zero_stage}", short, "LoRA" if self.finetuning == "lora" else "full"]
        if self.offload_optimizer or self.offload_params:
            parts.append("offload " + " + ".join(w for w, on in (("optimizer", self.offload_optimizer),
                                                                  ("params", self.offload_params)) if on))
        parts += [f"seq {self.sequence}", f"micro-batch {self.micro_batch}"]
        if self.gradient_checkpointing:
            parts.append("gradient checkpointing")
        return ", ".join(parts)


@dataclass(frozen=True)
class MemoryItem:
    what: str
    where: str  # card | host
    bytes: int
    how: str  # the formula in words


@dataclass
class MemoryEstimate:
    """One rank's memory, item by item. On CPU everything is host memory."""

    shape: ModelShape
    workload: Workload
    items: list[MemoryItem] = field(default_factory=list)

    def total(self, where: str) -> int:
        return sum(item.bytes for item in self.items if item.where == where)

    @property
    def card_bytes(self) -> int:
        return self.total("card")

    @property
    def host_bytes_per_rank(self) -> int:
        return self.total("host")

    @property
    def host_bytes(self) -> int:
        """What one host holds: every rank it runs."""
        return self.host_bytes_per_rank * self.workload.ranks_per_host



def estimate(shape: ModelShape, workload: Workload) -> MemoryEstimate:
    """The items one rank of ``workload`` holds."""
    result = MemoryEstimate(shape, workload)
    add = result.items.append
    # On CPU the "card" is the host: every item lands in host memory.
    device = "host" if workload.kind == "cpu" else "card"
    if workload.stage == "training":
        _training(shape, workload, device, add)
    else:
        _forward_only(shape, workload, device, add)
    if device == "card":
        margin = CARD_RUNTIME_MARGIN.get(workload.kind, 0)
        add(MemoryItem("runtime margin", "card", margin,
                       f"{format_gib(margin)} for the {workload.kind} runtime's context, workspaces and "
                       "allocator fragmentation: a margin, not a measurement"))
    runtime = HOST_RUNTIME.get(workload.kind, HOST_RUNTIME["cpu"])
    add(MemoryItem("runtime", "host", runtime, f"{format_gib(runtime)} for Python, torch and transformers"
                   + (f" and the {workload.kind} runtime's host side" if device == "card" else "")))
    if workload.extra_host_bytes:
        add(MemoryItem("proof model", "host", workload.extra_host_bytes,
                       "the shrunk model of the numerics check, twice in float32"))
    return result


def _training(shape: ModelShape, w: Workload, device: str, add) -> None:
    p, n, width = shape.parameters, w.world_size, w.width
    split3 = n if w.zero_stage == 3 else 1
    weights = p * width // split3
    add(MemoryItem(f"weights ({w.dtype})", "host" if w.offload_params and w.zero_stage == 3 else device, weights,
                   f"{p:,} x {width} B" + (f" / {n} ranks (ZeRO-3)" if split3 > 1 else "")))
    if w.zero_stage == 3:
        gathered = shape.largest_module_parameters * 4
        add(MemoryItem("ZeRO-3 gathered module", device, gathered,
                       f"the largest module ({shape.largest_module_parameters:,} parameters) gathered whole, "
                       "x 4 B as DeepSpeed counts it"))
    if device == "card":
        add(_loading(shape, w, split3))
    trainable = p if w.finetuning == "full" else lora_parameters(shape, w.lora_rank, w.lora_targets)
    if w.finetuning == "lora":
        add(MemoryItem(f"LoRA weights ({w.dtype})", device, trainable * width,
                       f"rank {w.lora_rank} on {', '.join(w.lora_targets)}: {trainable:,} x {width} B"))
    _optimizer_states(trainable, w, device, add)
    _activations(shape, w, device, add)
    if device == "host":
        add(MemoryItem("DeepSpeed buffers", "host", CPU_TRAINING_BUFFERS,
                       f"{format_gib(CPU_TRAINING_BUFFERS)} of flat copies while partitioning, measured on CPU"))


def _optimizer_states(trainable: int, w: Workload, device: str, add) -> None:
    """Gradients and Adam's states of ``trainable`` parameters, split as the ZeRO stage says.
    From ZeRO-1 on DeepSpeed keeps fp32 flat partitions (gradients, master weights) whatever
    the dtype; ZeRO-3 and an offloaded optimizer reduce the gradients straight into them."""
    n, width = w.world_size, w.width
    offload = w.offload_optimizer and w.zero_stage >= 1
    if w.zero_stage < 3 and not offload:
        grads_split = n if w.zero_stage == 2 else 1
        add(MemoryItem(f"gradients ({w.dtype})", device, trainable * width // grads_split,
                       f"{trainable:,} x {width} B" + (f" / {n} ranks (ZeRO-2)" if grads_split > 1 else "")))
    fp32_copies = FP32_GRADIENT + MASTER if width < 4 or w.zero_stage >= 1 else 0
    per_parameter = fp32_copies + ADAM
    states_split = n if w.zero_stage >= 1 else 1
    states = trainable * per_parameter // states_split
    how = (f"{trainable:,} x {per_parameter} B ("
           + ("fp32 gradients 4 + master weights 4 + " if fp32_copies else "") + "Adam moments 8)"
           + (f" / {n} ranks (ZeRO-{w.zero_stage})" if states_split > 1 else ""))
    if offload:
        add(MemoryItem("optimizer states, offloaded", "host", int(states * OFFLOAD_BUFFER_FACTOR),
                       how + f" x {OFFLOAD_BUFFER_FACTOR} (DeepSpeed's pinned buffers)"))
    else:
        add(MemoryItem("optimizer states", device, states, how))


def _activations(shape: ModelShape, w: Workload, device: str, add) -> None:
    tokens = w.sequence * w.micro_batch
    per_layer = layer_activation_bytes(shape, w)
    if w.gradient_checkpointing:
        # each layer keeps its input; one layer at a time is recomputed whole
        kept = tokens * shape.layers * shape.hidden * w.width + tokens * per_layer
        how = (f"{tokens:,} tokens x ({shape.layers} layers x {shape.hidden} x {w.width} B kept + one layer "
               f"recomputed, {per_layer:,} B a token)")
    else:
        kept = tokens * shape.layers * per_layer
        how = f"{tokens:,} tokens x {shape.layers} layers x {per_layer:,} B"
    add(MemoryItem("activations", device, kept, how + (" (eager attention's scores included)"
                                                       if w.eager_attention else "")))
    logits = tokens * shape.vocab * (w.width + 4 + 4)
    add(MemoryItem("logits and loss", device, logits,
                   f"{tokens:,} tokens x {shape.vocab:,} vocabulary x ({w.width} + 4 + 4) B: the logits, "
                   "their fp32 copy for the loss and its gradient"))


def layer_activation_bytes(shape: ModelShape, w: Workload) -> int:
    """Bytes one decoder layer keeps per token for the backward pass: its norms' inputs and
    the residual (4 x hidden) and their fp32 statistics (2 x hidden x 4 B), Q, K, V, the
    rotated Q and K and the attention output, the MLP's gate, up, activation and product
    (4 x intermediate); eager attention adds scores and probabilities per head. Checked
    against what a real Qwen2 saves for backward (tests/memory)."""
    q_width = shape.heads * shape.head_dim
    values = 4 * shape.hidden + 3 * q_width + 3 * shape.kv_width + 4 * shape.intermediate
    if w.eager_attention:
        values += 2 * shape.heads * w.sequence
    return values * w.width + 2 * shape.hidden * 4


def _forward_only(shape: ModelShape, w: Workload, device: str, add) -> None:
    p, width = shape.parameters, w.width
    copies = max(1, w.copies)
    add(MemoryItem(f"weights ({w.dtype})", device, p * width * copies,
                   f"{p:,} x {width} B" + (f" x {copies} models" if copies > 1 else "")))
    if device == "card":
        add(_loading(shape, w, 1))
    tokens = w.sequence + w.new_tokens
    if w.new_tokens:
        cache = 2 * shape.layers * shape.kv_width * tokens * w.micro_batch * width
        add(MemoryItem("KV cache", device, cache,
                       f"2 x {shape.layers} layers x {shape.kv_width} x {tokens:,} tokens x batch "
                       f"{w.micro_batch} x {width} B"))
    # a forward pass frees each layer's values as it goes: one layer's and the logits
    one_layer = w.sequence * w.micro_batch * layer_activation_bytes(shape, replace(w, eager_attention=True))
    logits = w.sequence * w.micro_batch * shape.vocab * 4
    add(MemoryItem("activations", device, (one_layer + logits) * copies,
                   f"one layer's values and the fp32 logits of {w.sequence:,} tokens x batch {w.micro_batch}"))


def _loading(shape: ModelShape, w: Workload, split: int) -> MemoryItem:
    """The host side of a rank's loading, before the weights move to its card. In the stored
    dtype ``from_pretrained`` maps the files: the host's ranks share those pages, counted
    once a host; in another dtype each rank converts its own copy."""
    stored = STORED_DTYPES.get(shape.stored_dtype)
    own = shape.parameters * w.width // split
    if stored == w.dtype:
        shared = shape.checkpoint_bytes // w.ranks_per_host
        return MemoryItem("checkpoint pages while loading", "host", shared,
                          f"{format_gib(shape.checkpoint_bytes)} of {shape.stored_dtype} files mapped once a host, "
                          f"shared by its {counted(w.ranks_per_host, 'rank')}")
    return MemoryItem("weights while loading", "host", own,
                      f"from_pretrained converts {shape.parameters:,} {shape.stored_dtype} weights to {w.width} B "
                      + (f"/ {split} (ZeRO-3) " if split > 1 else "") + "on the host before the move to the card")


def lora_parameters(shape: ModelShape, rank: int, targets: tuple[str, ...]) -> int:
    """LoRA's A and B of every targeted linear: rank x (inputs + outputs) each, in every layer.
    ``all`` targets every linear of a decoder layer."""
    q_width = shape.heads * shape.head_dim
    sizes = {"q_proj": (shape.hidden, q_width), "k_proj": (shape.hidden, shape.kv_width),
             "v_proj": (shape.hidden, shape.kv_width), "o_proj": (q_width, shape.hidden),
             "gate_proj": (shape.hidden, shape.intermediate), "up_proj": (shape.hidden, shape.intermediate),
             "down_proj": (shape.intermediate, shape.hidden)}
    names = LORA_LINEARS if "all" in targets else [t for t in targets if t in sizes]
    # a target named otherwise (a family's own name) is counted as a hidden x hidden linear
    unknown = 0 if "all" in targets else len([t for t in targets if t not in sizes])
    per_layer = sum(rank * sum(sizes[name]) for name in names) + unknown * rank * 2 * shape.hidden
    return per_layer * shape.layers
