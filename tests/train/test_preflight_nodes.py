"""Stage 04's plan with ``nodes_from``: the node parameters read from the environment first, the
plan built on them, and node 0's notes saying how to start each other node (nothing started)."""

from __future__ import annotations

import argparse
import shlex
import socket
import time
from pathlib import Path

import pytest

from hyport_lib.backend import get_backend
from hyport_lib.nodes.handshake import compare
from hyport_lib.nodes.inputs import NodeInputError
from hyport_lib.params import add_arguments, from_arguments
from hyport_lib.train import preflight
from hyport_lib.train.job_nodes import node_card
from hyport_lib.train.launch import launch
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import check_master_addr, free_port, job_rdzv_id, prepare, rendezvous_port
from hyport_lib.train.smoke_data import SMOKE_FILE, write_smoke_dataset

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


def test_node_1_started_with_node_0s_line_shows_the_same_card(tmp_path, monkeypatch, llama_factory_node0):
    """Node 0 from the environment with a relative dataset_path; node 1 with the line node 0
    printed (no nodes_from, the path made absolute): every compared value is the same."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    write_smoke_dataset(tmp_path / "data")
    relative = str(Path("data") / SMOKE_FILE)
    out = tmp_path / "shared"
    node0 = prepare(Params(nodes_from="env", dataset_path=relative, output_dir=str(out)), get_backend("cpu"))
    line = next(n for n in node0.notes if n.startswith("start node 1 with: ")).split(" with: ", 1)[1]
    parser = argparse.ArgumentParser()
    add_arguments(parser, Params)
    for name in NODE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    node1 = prepare(from_arguments(Params, parser.parse_args(shlex.split(line)[2:])), get_backend("cpu"))
    assert (node1.params.node_rank, node1.params.nodes_from, node0.params.nodes_from) == (1, None, "env")
    first, second = node_card(node0, "t"), node_card(node1, "t")
    assert first.plan and second.plan == first.plan and second.files == first.files
    assert "dataset_path" in first.files
    assert compare(first, second, "shared") == ""


def test_the_rendezvous_id_is_the_same_whatever_each_node_calls_the_master():
    by_name = job_rdzv_id(Params(nnodes=2, master_addr="node-a", master_port=29500, run_name="r"))
    by_address = job_rdzv_id(Params(nnodes=2, master_addr="10.0.0.1", master_port=29500, run_name="r"))
    assert by_name == by_address == "hyport-r-29500"
    assert job_rdzv_id(Params(nnodes=2, master_port=29501, run_name="r")) != by_name


def test_node_0_checks_master_port_where_its_store_listens_every_interface():
    """Another address of this host (127.0.0.2) holds the port: the store on 0.0.0.0 could not bind."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.2", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        with pytest.raises(ValueError, match=f"^master_port={taken} is already taken on this host \\(0.0.0.0: "):
            rendezvous_port(Params(nnodes=2, node_rank=0, master_addr="127.0.0.1", master_port=taken))
        assert rendezvous_port(Params(nnodes=2, node_rank=1, master_addr="127.0.0.1", master_port=taken)) == taken


def test_a_port_taken_after_the_plan_ends_node_0s_launch_in_one_line(tmp_path):
    plan = prepare(Params(nnodes=2, num_cards=1, master_port=free_port(), max_steps=1, resume_from="none",
                          output_dir=str(tmp_path / "job")), get_backend("cpu"))
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", plan.master_port))
        sock.listen()
        result = launch(plan)
    assert result.status == "failed" and "\n" not in result.reason
    assert result.reason.startswith(f"master_port={plan.master_port} is already taken on this host "), result.reason
    assert result.diagnosis is None


def test_a_master_addr_the_resolver_never_answers_is_refused_in_time(monkeypatch):
    def silent(*args, **kwargs):
        time.sleep(2)
        raise socket.gaierror("late")

    monkeypatch.setattr(socket, "getaddrinfo", silent)
    monkeypatch.setattr(preflight, "MASTER_RESOLVE_S", 0.2)
    started = time.monotonic()
    with pytest.raises(ValueError, match="master_addr='slow.example' does not resolve: the resolver gave no answer "
                                         "within 0.2 s"):
        check_master_addr(Params(nnodes=2, master_addr="slow.example", master_port=29500))
    assert time.monotonic() - started < 1.5
