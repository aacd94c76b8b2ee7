"""The line node 0's plan gives for each other node: it parses back through ``hyport train``'s
own parser to the same parameters, with that node's rank."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import pytest

from hyport_lib.commands import build_parser
from hyport_lib.nodes.start_command import start_command, start_notes
from hyport_lib.params import from_arguments
from hyport_lib.train.params import SAMPLE_DATASETS, Params


def _parsed(command: str) -> Params:
    words = shlex.split(command)
    assert words[:2] == ["hyport", "train"]
    return from_arguments(Params, build_parser(["train"]).parse_args(words[1:]))


def test_the_line_parses_back_to_the_same_parameters_with_the_rank_swapped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out dir").mkdir()
    dataset = str(SAMPLE_DATASETS / "alpaca.json")
    params = Params(nodes_from="env", nnodes=3, node_rank=0, master_addr="10.0.0.1", master_port=29500, num_cards=2,
                    learning_rate=1e-5, packing=False, max_steps=None, num_train_epochs=2.0, output_dir="out dir",
                    run_name="it's a run", lora_target="q_proj, v_proj", max_shard_size=None, dataset_path=dataset,
                    dataset_columns={"prompt": "instruction", "query": None}, gradient_checkpointing=False)
    for rank in (1, 2):
        command = start_command(params, rank)
        assert f"--node-rank {rank}" in command and "--nodes-from" not in command
        assert f"--output-dir {shlex.quote(str(tmp_path / 'out dir'))}" in command  # absolute: another node's cwd
        expected = dataclasses.replace(params, node_rank=rank, nodes_from=None, output_dir=str(tmp_path / "out dir"))
        assert _parsed(command) == expected
    assert start_command(Params(), 0) == "hyport train --node-rank 0"  # the defaults are not repeated


def test_no_secret_reaches_the_line(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefgh12345678")
    command = start_command(Params(run_name="hf_abcdefgh12345678", master_addr="http://user:pa55word@node1",
                                   nnodes=2, master_port=29500), 1)
    assert "hf_abcdefgh12345678" not in command and "pa55word" not in command
    assert "[redacted]" in command and "--node-rank 1" in command


@pytest.mark.parametrize("nnodes, node_rank, lines", [(3, 0, 2), (3, 1, 0), (1, 0, 0)])
def test_node_zero_of_a_multi_node_run_lists_a_line_per_other_node(nnodes, node_rank, lines):
    notes = start_notes(Params(nnodes=nnodes, node_rank=node_rank, master_port=29500 if nnodes > 1 else 0))
    assert len(notes) == lines
    assert [n.split(" with: ")[0] for n in notes] == [f"start node {r}" for r in range(1, lines + 1)]
    assert all(n.endswith(f"--node-rank {r}") or f"--node-rank {r} " in n for r, n in enumerate(notes, 1))


def test_the_readmes_multi_host_commands_are_hyport_trains_flags():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## More than one host", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"hyport train --[^`\n]+", section)
    assert len(commands) == 4
    parser = build_parser(["train"])
    for command in commands:
        args = parser.parse_args(shlex.split(command)[1:])  # an unknown flag exits 2
        assert args.output_dir.startswith("/shared/") or args.output_dir.startswith("/mnt/shared/")
