"""``hyport plan --model-path M --num-cards 8``: will it fit? Every ZeRO stage x full / LoRA
fine-tune and inference of the model, per card and per host, from its headers alone: nothing
is loaded, so it answers on any host, a laptop planning for a cluster included.
"""

from __future__ import annotations

import argparse
import math

from hyport_lib.backend import get_backend
from hyport_lib.memory.capacity import capacity, describe
from hyport_lib.memory.model import DTYPE_NAMES, LORA_LINEARS, Workload
from hyport_lib.memory.shape import format_gib, model_shape
from hyport_lib.memory.table import common_settings, plan_table
from hyport_lib.models.preflight import check_model_path
from hyport_lib.utils.files import dumps_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-path", required=True, help="a checkpoint folder, 'tiny' or 'smollm2'")
    parser.add_argument("--device", default="npu", choices=("npu", "cuda", "cpu"),
                        help="the cards planned for (default npu); their memory is read where one is visible")
    parser.add_argument("--num-cards", type=int, default=8, help="cards (or CPU processes) per host (default 8)")
    parser.add_argument("--nnodes", type=int, default=1, help="hosts (default 1)")
    parser.add_argument("--card-memory-gib", type=float, default=None,
                        help="GiB per card where no card can be asked (910B3: 64)")
    parser.add_argument("--host-ram-gib", type=float, default=None,
                        help="GiB of RAM of each host planned for (default: this host's)")
    parser.add_argument("--precision", default="bf16", choices=sorted(DTYPE_NAMES), help="default bf16")
    parser.add_argument("--max-seq-len", type=int, default=2048, help="tokens per row (default 2048)")
    parser.add_argument("--micro-batch", type=int, default=1, help="rows per card and step (default 1)")
    parser.add_argument("--no-gradient-checkpointing", action="store_true",
                        help="plan without recomputing activations")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--lora-target", default="q_proj,v_proj", help='comma-separated, or "all"')
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens generated (inference row)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="build a model without safetensors weights from its own code (off by default)")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")


def run(args: argparse.Namespace) -> int:
    for name in ("num_cards", "nnodes", "max_seq_len", "micro_batch", "lora_rank", "new_tokens"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)}: expected a positive number")
    for name in ("card_memory_gib", "host_ram_gib"):
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"--{name.replace('_', '-')}={value:g}: expected a positive number")
    folder = check_model_path(args.model_path, param="--model-path")
    shape = model_shape(folder, trust_remote_code=args.trust_remote_code)
    found = capacity(_backend_if_here(args.device), args.card_memory_gib, args.host_ram_gib)
    targets = tuple(t.strip() for t in args.lora_target.split(",") if t.strip())
    if not targets:
        raise ValueError(f"--lora-target={args.lora_target!r}: expected layer names, comma-separated, or 'all'")
    workload = Workload("training", args.device, DTYPE_NAMES[args.precision],
                        world_size=args.num_cards * args.nnodes, ranks_per_host=args.num_cards,
                        sequence=args.max_seq_len, micro_batch=args.micro_batch,
                        gradient_checkpointing=not args.no_gradient_checkpointing,
                        lora_rank=args.lora_rank, lora_targets=targets)
    table = plan_table(shape, workload, found, new_tokens=args.new_tokens)
    if args.json:
        print(dumps_json({"model": shape.name, "parameters": shape.parameters,
                          "capacity": describe(found, args.device),
                          "plans": table.to_dict(orient="records")}, indent=2))
        return 0
    hosts = f" x {args.nnodes} hosts" if args.nnodes > 1 else ""
    unit = "card" if args.device != "cpu" else "process"
    print(f"{shape.name}: {shape.parameters / 1e9:.3g} B parameters, {format_gib(shape.checkpoint_bytes)} of "
          f"{shape.stored_dtype} ({shape.source})")
    units = unit if args.num_cards == 1 else unit + ("es" if unit == "process" else "s")
    print(f"{args.num_cards} {units}{hosts}; {describe(found, args.device)}")
    print(f"every row: {common_settings(workload)}")
    print(table.to_string(index=False))
    unknown = [t for t in targets if t != "all" and t not in LORA_LINEARS]
    if unknown:
        said = "is no layer name" if len(unknown) == 1 else "are no layer names"
        print(f"LoRA: {', '.join(unknown)} {said} the memory model knows; costed as hidden x hidden each")
    print("Estimates before loading, in GiB (docs/memory.md); a CPU host's figures are not an NPU's.")
    return 0


def _backend_if_here(device: str):
    """The backend when such cards are visible here (their memory is then read); None when
    planning for cards this host does not have."""
    try:
        backend = get_backend(device)
        return backend if backend.kind == "cpu" or backend.num_cards() > 0 else None
    except RuntimeError:
        return None
