"""Node parameters from torchrun's, LLaMA-Factory's and ModelArts' variables and from a DeepSpeed
hostfile: each source, each bad input in one line, the order of the sources, and the train
parameters they settle."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Optional

import pytest

from hyport_lib.nodes.addresses import ThisMachine
from hyport_lib.nodes.inputs import (NodeInputError, from_environment, from_hostfile, parse_hostfile,
                                     read_node_settings, settle_node_parameters)
from hyport_lib.params import StageParams, param
from hyport_lib.train.params import Params

LLAMA_FACTORY = {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
                 "NPROC_PER_NODE": "8", "RDZV_ID": "job7", "MAX_RESTARTS": "1"}
MODELARTS = {"MA_NUM_HOSTS": "3", "VC_WORKER_NUM": "3", "VC_TASK_INDEX": "2", "MA_NUM_GPUS": "8",
             "VC_WORKER_HOSTS": "job-worker-0.job,job-worker-1.job,job-worker-2.job", "MA_CURRENT_IP": "192.168.0.9"}
#: This machine as a hostfile names it in the tests that play another host.
NODE2 = ThisMachine(frozenset({"node2"}), frozenset({"10.0.0.2"}))


def _refused(match: str, **call):
    with pytest.raises(NodeInputError, match=match) as caught:
        call.pop("fn")(**call)
    assert "\n" not in str(caught.value)  # one line
    return str(caught.value)


# --------------------------------------------------------------------------- each source
def test_llama_factory_names_give_every_field_and_say_where_they_came_from():
    s = from_environment(LLAMA_FACTORY)
    assert (s.nnodes, s.node_rank, s.master_addr, s.master_port) == (2, 1, "10.0.0.1", 29500)
    assert (s.nproc_per_node, s.rdzv_id, s.max_restarts) == (8, "job7", 1)
    assert s.source == ("LLaMA-Factory variables NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE, "
                        "RDZV_ID, MAX_RESTARTS")
    assert s.origins["node_rank"] == "NODE_RANK=1"


def test_one_node_needs_no_rank_or_master_and_auto_processes_are_every_card():
    s = from_environment({"NNODES": "1", "NPROC_PER_NODE": "auto"})
    assert (s.nnodes, s.node_rank, s.master_addr, s.nproc_per_node) == (1, 0, None, None)
    assert s.said() == {"nnodes": 1, "node_rank": 0}


def test_torchruns_own_pet_variables_with_a_fixed_range_and_a_rendezvous_endpoint():
    s = from_environment({"PET_NNODES": "2:2", "PET_NODE_RANK": "1", "PET_RDZV_ENDPOINT": "[fd00::1]:29400",
                          "PET_NPROC_PER_NODE": "4", "PET_RDZV_ID": "r1"})
    assert (s.nnodes, s.node_rank, s.master_addr, s.master_port, s.nproc_per_node, s.rdzv_id) == \
        (2, 1, "fd00::1", 29400, 4, "r1")
    assert s.source.startswith("torchrun's variables PET_NNODES, PET_NODE_RANK") and "PET_RDZV_ENDPOINT" in s.source
    s = from_environment({"PET_NNODES": "2", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "m", "PET_MASTER_PORT": "1234"})
    assert (s.master_addr, s.master_port) == ("m", 1234)


def test_modelarts_master_is_the_first_worker_host_and_the_rank_its_task_index():
    s = from_environment({**MODELARTS, "MASTER_PORT": "29500"})
    assert (s.nnodes, s.node_rank, s.master_addr, s.master_port, s.nproc_per_node) == \
        (3, 2, "job-worker-0.job", 29500, 8)
    assert s.source.startswith("ModelArts variables MA_NUM_HOSTS, VC_WORKER_NUM, VC_TASK_INDEX, VC_WORKER_HOSTS")
    alone = from_environment({"MA_NUM_HOSTS": "1", "MA_NUM_GPUS": "0"})  # a one-node job; a CPU flavour
    assert (alone.nnodes, alone.node_rank, alone.master_addr, alone.nproc_per_node) == (1, 0, None, None)


def test_a_hostfile_as_deepspeed_reads_it_and_this_machines_line(tmp_path):
    from deepspeed.launcher.runner import _parse_hostfile

    text = "# the job's hosts\n\nnode1 slots=8\n  node2 slots=8  # a comment\nnode3 slots=8 max_slots=8\n"
    path = tmp_path / "hostfile"
    path.write_text(text)
    assert {h.host: h.slots for h in parse_hostfile(str(path), text)} == dict(_parse_hostfile(text.splitlines()))
    s = from_hostfile(str(path), {"MASTER_PORT": "29500"}, machine=NODE2)
    assert (s.nnodes, s.node_rank, s.master_addr, s.master_port, s.nproc_per_node) == (3, 1, "node1", 29500, 8)
    assert s.origins["node_rank"] == f"hostfile {path} line 4 (node2: this machine)"
    by_address = ThisMachine(frozenset({"elsewhere"}), frozenset({"10.0.0.3"}))
    (tmp_path / "by_ip").write_text("10.0.0.1 slots=2\n10.0.0.3 slots=2\n")
    assert from_hostfile(str(tmp_path / "by_ip"), {}, machine=by_address).node_rank == 1
    assert from_hostfile(str(tmp_path / "by_ip"), {}, machine=by_address).master_port is None


def test_the_real_machine_is_found_by_name_and_by_loopback_and_several_lines_need_a_node_rank(tmp_path):
    path = tmp_path / "hosts"
    path.write_text(f"elsewhere.invalid slots=1\n{socket.gethostname()} slots=1\n")
    assert from_hostfile(str(path), {}).node_rank == 1
    path.write_text("localhost slots=1\n127.0.0.1 slots=1\n")  # two "nodes" on this machine
    assert from_hostfile(str(path), {}, node_rank=1).node_rank == 1
    assert from_hostfile(str(path), {}).node_rank == 0
    path.write_text("localhost slots=1\n127.0.0.1 slots=1\nelsewhere.invalid slots=1\n")
    _refused(rf"hostfile {path}: this machine is line 1 \(localhost\), line 2 \(127.0.0.1\); node_rank=2 is none "
             "of them: give node_rank=0 or 1", fn=from_hostfile, path=str(path), environ={}, node_rank=2)


# --------------------------------------------------------------------------- bad input, one line each
@pytest.mark.parametrize("environ, said", [
    ({"NNODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "m"}, "NODE_RANK=2 but NNODES=2: NODE_RANK must be 0 .. 1"),
    ({"NNODES": "2", "MASTER_ADDR": "m"}, "NNODES=2 but NODE_RANK is not set: give each node its rank, 0 .. 1"),
    ({"NNODES": "2", "NODE_RANK": "1"}, "NNODES=2 but MASTER_ADDR is not set"),
    ({"NNODES": "two"}, "NNODES='two': expected a whole number"),
    ({"NNODES": "0"}, "NNODES='0': expected a whole number >= 1"),
    ({"NNODES": "1", "MASTER_PORT": "70000"}, "MASTER_PORT='70000': a port is 1 .. 65535"),
    ({"NNODES": "1", "NPROC_PER_NODE": "gpu"}, "NPROC_PER_NODE='gpu': hyport needs a number of processes per node"),
    ({**LLAMA_FACTORY, "MIN_NNODES": "1", "MAX_NNODES": "4"}, "MIN_NNODES=1 with RDZV_ID \\(an elastic node range, "
                                                               "MIN_NNODES:MAX_NNODES=1:4\\) but NNODES=2"),
    ({**LLAMA_FACTORY, "MIN_NNODES": "2", "MAX_NNODES": "3"}, "MAX_NNODES=3 with RDZV_ID"),
    ({"PET_NNODES": "1:3"}, "PET_NNODES='1:3': an elastic node range"),
    ({"PET_NNODES": "2", "PET_NODE_RANK": "0", "PET_MASTER_PORT": "1", "PET_RDZV_ENDPOINT": "m:2"},
     "PET_MASTER_PORT=1 but PET_RDZV_ENDPOINT=m:2: they disagree"),
    ({"PET_NNODES": "1", "PET_RDZV_ENDPOINT": "m"}, "PET_RDZV_ENDPOINT='m': expected HOST:PORT"),
    ({**MODELARTS, "VC_WORKER_NUM": "2"}, "ModelArts variables disagree on the number of nodes \\(MA_NUM_HOSTS=3, "
                                          "VC_WORKER_NUM=2, VC_WORKER_HOSTS lists 3\\)"),
    ({**MODELARTS, "VC_TASK_INDEX": "3"}, "VC_TASK_INDEX=3 but MA_NUM_HOSTS=3: VC_TASK_INDEX must be 0 .. 2"),
    ({"MA_NUM_HOSTS": "2", "VC_TASK_INDEX": "1"}, "MA_NUM_HOSTS=2 but VC_WORKER_HOSTS is not set"),
    ({"MA_NUM_HOSTS": "2", "VC_WORKER_HOSTS": "a,b"}, "MA_NUM_HOSTS=2 but VC_TASK_INDEX is not set"),
    ({"VC_WORKER_HOSTS": "a,,b"}, "VC_WORKER_HOSTS='a,,b': an empty host name"),
    ({"HOME": "/root"}, "nodes_from='env': no node variables are set"),
], ids=lambda v: next(iter(v)) if isinstance(v, dict) else None)
def test_a_bad_variable_is_named_in_one_line(environ, said):
    _refused(said, fn=from_environment, environ=environ)


def test_min_and_max_nnodes_count_only_as_llama_factory_s_launcher_uses_them():
    """src/llamafactory/cli.py: --nnodes MIN_NNODES:MAX_NNODES only with RDZV_ID and both set."""
    without_rdzv = {k: v for k, v in LLAMA_FACTORY.items() if k != "RDZV_ID"}
    for environ in ({**LLAMA_FACTORY, "MIN_NNODES": "1"}, {**LLAMA_FACTORY, "MAX_NNODES": "4"},
                    {**without_rdzv, "MIN_NNODES": "1", "MAX_NNODES": "4"},
                    {**LLAMA_FACTORY, "MIN_NNODES": "2", "MAX_NNODES": "2"}):
        assert from_environment(environ).nnodes == 2, environ


@pytest.mark.parametrize("text, said", [
    ("node1 slots=8\n\nnode2 slots=x\n", "line 3: 'node2 slots=x': slots must be a number \\(slots=x\\)"),
    ("node1 slots=8\nnode2 slots=8x\n", "line 2: 'node2 slots=8x': slots must be a number"),
    ("node1 slots=8#gpu\n", "line 1: 'node1 slots=8#gpu': slots must be a number \\(slots=8#gpu\\)"),
    ("worker-1 gpus=8 slots=8\n", "line 1: 'worker-1 gpus=8 slots=8': slots= must follow the host name"),
    ("node1 slots=8\nnode2\n", "line 2: 'node2': expected 'HOST slots=N'"),
    ("node1 slots=8\nnode1 slots=8\n", "line 2: 'node1 slots=8': node1 is listed already \\(line 1\\)"),
    ("node1 slots=0\n", "line 1: 'node1 slots=0': slots must be at least 1"),
    ("# nothing\n\n", "lists no host"),
    ("node1 slots=8\nnode2 slots=4\n", "the slots differ \\(line 1: node1 slots=8, line 2: node2 slots=4\\)"),
])
def test_a_bad_hostfile_line_is_named_with_the_file_and_its_number(tmp_path, text, said):
    path = tmp_path / "h.txt"
    path.write_text(text)
    _refused(f"hostfile {path}.*{said}", fn=from_hostfile, path=str(path), environ={}, machine=NODE2)


def test_a_machine_missing_from_the_hostfile_a_missing_file_and_a_folder_are_named(tmp_path):
    path = tmp_path / "h.txt"
    path.write_text("node1 slots=8\nnode3 slots=8\n")
    _refused(rf"this machine \(node2; 10.0.0.2\) is not in hostfile {path} \(node1, node3\)",
             fn=from_hostfile, path=str(path), environ={}, machine=NODE2)
    _refused("nodes_from='.*nope': no such file", fn=read_node_settings, nodes_from=str(tmp_path / "nope"))
    _refused("nodes_from='.*': .*folder", fn=read_node_settings, nodes_from=str(tmp_path))


# --------------------------------------------------------------------------- which source
def test_torchrun_comes_first_llama_factory_second_modelarts_last_and_they_must_agree():
    pet = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.0.0.1"}
    assert from_environment({**LLAMA_FACTORY, **pet}).source.startswith("torchrun's variables")
    agreeing = {**MODELARTS, "NNODES": "3", "NODE_RANK": "2", "MASTER_ADDR": "job-worker-0.job"}
    both = from_environment(agreeing)
    assert both.source.startswith("LLaMA-Factory variables") and both.nproc_per_node is None  # only the first's
    assert from_environment(MODELARTS).source.startswith("ModelArts variables")
    _refused(r"PET_NNODES=2 \(torchrun's variables .*\) but NNODES=3 \(LLaMA-Factory variables .*\): the sources "
             "disagree; unset one of them", fn=from_environment, environ={**agreeing, **pet})
    _refused(r"NODE_RANK=1 .* but VC_TASK_INDEX=2 \(ModelArts", fn=from_environment,
             environ={**agreeing, "NODE_RANK": "1"})


def test_the_process_environment_is_read_by_default(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("PET_", "MA_", "VC_")) or name in LLAMA_FACTORY:
            monkeypatch.delenv(name)
    monkeypatch.setenv("NNODES", "1")
    assert read_node_settings("env").source == "LLaMA-Factory variables NNODES"


# --------------------------------------------------------------------------- the parameters
def test_defaults_take_the_sources_values_and_a_given_value_must_agree():
    params, notes = settle_node_parameters(Params(nodes_from="env"), LLAMA_FACTORY)
    assert (params.nnodes, params.node_rank, params.master_addr, params.master_port, params.num_cards,
            params.max_restarts) == (2, 1, "10.0.0.1", 29500, 8, 1)
    assert notes[0].startswith("nodes from LLaMA-Factory variables NNODES, NODE_RANK") and "nnodes=2" in notes[0]
    same, _ = settle_node_parameters(Params(nodes_from="env", nnodes=2, master_port=29500), LLAMA_FACTORY)
    assert same == params
    said = _refused("nnodes=3 but NNODES=2 \\(nodes_from='env'\\): they disagree", fn=settle_node_parameters,
                    params=Params(nodes_from="env", nnodes=3, node_rank=1, master_port=29500),
                    environ=LLAMA_FACTORY)
    assert "leave nnodes out" in said
    _refused("num_cards=2 but NPROC_PER_NODE=8", fn=settle_node_parameters,
             params=Params(nodes_from="env", num_cards=2), environ=LLAMA_FACTORY)
    untouched = Params()
    assert settle_node_parameters(untouched, LLAMA_FACTORY) == (untouched, [])


def test_a_hostfile_sets_the_parameters_and_a_node_rank_naming_another_host_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "hostfile"
    path.write_text("node1 slots=2\nnode2 slots=2\n")
    params, _ = settle_node_parameters(Params(nodes_from=str(path), master_port=29500), {}, machine=NODE2)
    assert (params.nnodes, params.node_rank, params.master_addr, params.num_cards) == (2, 1, "node1", 2)
    _refused(rf"master_port=1 but MASTER_PORT=2 \(nodes_from='{path}'\)", fn=settle_node_parameters,
             params=Params(nodes_from=str(path), master_port=1, nnodes=1), environ={"MASTER_PORT": "2"}, machine=NODE2)
    path.write_text("node1 slots=2\nnode2 slots=2\nnode3 slots=2\n")
    _refused(rf"node_rank=2 but hostfile {path} line 2 \(node2: this machine\)", fn=settle_node_parameters,
             params=Params(nodes_from=str(path), nnodes=3, node_rank=2, master_port=1), environ={}, machine=NODE2)


@dataclass
class _FewParams(StageParams):
    """A stage with only some of the node parameters: the rest are not set."""

    nodes_from: Optional[str] = param(None, "where the nodes are said")
    nnodes: int = param(1, "nodes", min=1)
    node_rank: int = param(0, "this node", min=0)


def test_a_setting_without_its_parameter_is_not_set():
    params, notes = settle_node_parameters(_FewParams(nodes_from="env"), LLAMA_FACTORY)
    assert (params.nnodes, params.node_rank) == (2, 1)
    assert notes == ["nodes from LLaMA-Factory variables NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, "
                     "NPROC_PER_NODE, RDZV_ID, MAX_RESTARTS: nnodes=2, node_rank=1"]


def test_a_missing_hostfile_is_refused_when_the_parameters_are_made(tmp_path):
    with pytest.raises(ValueError, match="nodes_from='.*nope': no such file"):
        Params(nodes_from=str(tmp_path / "nope"))
    assert Params(nodes_from="env").nodes_from == "env"
