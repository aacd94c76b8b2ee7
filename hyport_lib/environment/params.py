"""Stage 01's parameters: notebook ``01_environment``'s ``parameters`` cell, ``hyport env``'s
flags and the report's keys, declared once (see :mod:`hyport_lib.params`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hyport_lib.params import (StageParams, card_memory_param, device_param, model_path_param, nodes_from_param,
                               num_cards_param, param)


@dataclass
class Params(StageParams):
    device: str = device_param()
    num_cards: Optional[int] = num_cards_param(
        "cards the next stages will use; None: all (2 worker processes on CPU)")
    card_memory_gib: Optional[float] = card_memory_param(group="Memory")
    ram_gb_per_card: Optional[float] = param(
        None, "host RAM needed per card, in GiB; None: the memory model's figure for model_path's inference, else the "
              "backend's default", min_exclusive=0, group="Memory")
    shm_gb_per_card: Optional[float] = param(
        None, "/dev/shm needed per card, in GiB; None: the backend's default", min_exclusive=0, group="Memory")
    check_ports: bool = param(True, "bind-test the HCCL ports (60000 upward, 16666)")
    model_path: str = model_path_param(
        "the model the next stages load: does its processor need torchvision, how much host RAM per rank?")
    host_root: str = param(
        "/", "the filesystem root the container and driver checks read; a copy of a host's "
             "folders checks them offline", nonempty=True, path="dir", must_exist=True, group="Advanced")
    nodes_from: Optional[str] = nodes_from_param()
    nnodes: Optional[int] = param(
        None, "hosts in the job; None: from nodes_from, the node variables (torchrun's, LLaMA-Factory's, "
              "ModelArts') or the rank table", min=1, group="Several hosts")
    node_rank: Optional[int] = param(
        None, "this host's node rank; None: from nodes_from, the node variables, else node 0 where master_addr "
              "is this host", min=0, group="Several hosts")
    master_addr: Optional[str] = param(
        None, "the rendezvous host (node 0's); None: from nodes_from or the node variables", nonempty=True,
        group="Several hosts")
    master_port: Optional[int] = param(
        None, "the rendezvous port; None: from MASTER_PORT / PET_MASTER_PORT / PET_RDZV_ENDPOINT, else "
              "torchrun's 29500", min=0, max=65535, group="Several hosts")
