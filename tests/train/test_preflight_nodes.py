"""Stage 04's plan with ``nodes_from``: the node parameters read from the environment first, the
plan built on them, and node 0's notes saying how to start each other node (nothing started)."""

from __future__ import annotations

import shlex

import pytest

from hyport_lib.backend import get_backend
from hyport_lib.nodes.inputs import NodeInputError
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import free_port, prepare

NODE_VARIABLES = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE", "RDZV_ID", "MAX_RESTARTS",
                  "MIN_NNODES", "MAX_NNODES")


@pytest.fixture
def llama_factory_node0(monkeypatch):
    for name in NODE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name in ("PET_NNODES", "MA_NUM_HOSTS", "VC_WORKER_NUM", "VC_WORKER_HOSTS"):
        monkeypatch.delenv(name, raising=False)
    port = free_port()
    for name, value in {"NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                        "NPROC_PER_NODE": "1"}.items():
        monkeypatch.setenv(name, value)
    return port


def test_nodes_from_env_plans_two_nodes_and_says_how_to_start_node_1(tmp_path, llama_factory_node0):
    out = tmp_path / "shared"
    plan = prepare(Params(nodes_from="env", output_dir=str(out)), get_backend("cpu"))
    assert (plan.params.nnodes, plan.params.node_rank, plan.params.num_cards) == (2, 0, 1)
    assert (plan.nproc_per_node, plan.world_size) == (1, 2)
    assert (plan.master_addr, plan.master_port) == ("127.0.0.1", llama_factory_node0)
    assert plan.notes[0] == (f"nodes from LLaMA-Factory variables NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, "
                             f"NPROC_PER_NODE: nnodes=2, node_rank=0, master_addr='127.0.0.1', "
                             f"master_port={llama_factory_node0}, num_cards=1")
    starts = [n for n in plan.notes if n.startswith("start node ")]
    assert starts == [f"start node 1 with: hyport train --num-cards 1 --output-dir {shlex.quote(str(out))} "
                      f"--nnodes 2 --node-rank 1 --master-port {llama_factory_node0}"]
    assert plan.worker_spec()["params"]["nnodes"] == 2  # the workers get the settled parameters
    assert not out.exists()


def test_a_given_value_the_environment_contradicts_stops_the_plan(tmp_path, llama_factory_node0):
    with pytest.raises(NodeInputError, match="num_cards=2 but NPROC_PER_NODE=1 \\(nodes_from='env'\\)"):
        prepare(Params(nodes_from="env", num_cards=2, output_dir=str(tmp_path / "o")), get_backend("cpu"))
