"""The handshake's comparison (hyport_lib/nodes/handshake.py), without any process: the first
difference named in one line (node, host, field), files by name, node 0's token, the resume point."""

from __future__ import annotations

import struct

from hyport_lib.nodes.handshake import NodeCard, Verdict, compare, file_digest, plan_hash, verdict


def _card(node_rank=0, token="t0", plan=None, files=None, versions=None, output_dir="/shared/job") -> NodeCard:
    plan = {"learning_rate": 1e-4, "max_steps": 3} if plan is None else plan
    files = {"dataset file data.jsonl": "aa", "model file config.json": "bb"} if files is None else files
    versions = {"torch": "2.13.0", "CANN": "8.0.RC3", "HCCL_IF_IP": f"10.0.0.{node_rank + 1}"} \
        if versions is None else versions
    return NodeCard(node_rank=node_rank, host=f"h{node_rank}", output_dir=output_dir, plan=plan, files=files,
                    versions=versions, token=token, plan_hash=plan_hash(plan, files))


def test_the_same_plan_files_and_versions_pass_whatever_each_hosts_own_address():
    assert compare(_card(), _card(1), "shared") == ""


def test_a_parameter_is_named_with_both_values():
    other = _card(1, plan={"learning_rate": 2e-4, "max_steps": 3})
    assert compare(_card(), other, "shared") == \
        "node 1 (host h1): learning_rate differs: 0.0001 on node 0, 0.0002 on node 1"


def test_a_file_is_named_and_a_missing_one_said_so():
    other = _card(1, files={"dataset file data.jsonl": "zz", "model file config.json": "bb"})
    assert compare(_card(), other, "shared") == \
        "node 1 (host h1): dataset file data.jsonl differs from node 0's (its bytes)"
    fewer = _card(1, files={"dataset file data.jsonl": "aa"})
    assert compare(_card(), fewer, "shared") == "node 1 (host h1): model file config.json differs: missing on node 1"


def test_a_version_is_named_and_secrets_never_compared():
    other = _card(1, versions={"torch": "2.13.0", "CANN": "8.1.RC1", "HCCL_IF_IP": "10.0.0.2"})
    assert compare(_card(), other, "shared") == "node 1 (host h1): CANN differs: 8.0.RC3 on node 0, 8.1.RC1 on node 1"


def test_node_0s_token_is_needed_only_on_shared_storage():
    unshared = _card(1, token="", output_dir="/local/job")
    refusal = compare(_card(), unshared, "shared")
    assert refusal.startswith("node 1 (host h1): does not see node 0's token in output_dir='/local/job'")
    assert "storage='node_local'" in refusal
    assert compare(_card(), unshared, "node_local") == ""


def test_the_verdict_carries_node_0s_resume_point_into_each_nodes_folder():
    judged = verdict(_card(), [_card(), _card(1)], "shared", "/shared/job/checkpoint-2")
    assert judged.accepted and judged.nodes == 2
    again = Verdict.from_json(judged.to_json())
    assert again.resume_path("/shared/job") == "/shared/job/checkpoint-2"
    assert again.resume_path("/local/job") == "/local/job/checkpoint-2"  # node-local: its own copy
    refused = verdict(_card(), [_card(1, plan={"learning_rate": 1e-4, "max_steps": 4})], "shared", "/x")
    assert not refused.accepted and refused.resume_checkpoint is None
    assert refused.refusal == "node 1 (host h1): max_steps differs: 3 on node 0, 4 on node 1"


def test_a_safetensors_file_is_known_by_its_header_and_size(tmp_path):
    header = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    one, two = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    one.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00\x00\x00\x00")
    two.write_bytes(struct.pack("<Q", len(header)) + header + b"\x01\x00\x00\x00")
    assert file_digest(one) == file_digest(two)  # the weights' bytes are not read
    text = tmp_path / "config.json"
    text.write_text("{}")
    before = file_digest(text)
    text.write_text("{ }")
    assert file_digest(text) != before


def test_a_node_rank_given_twice_is_refused_naming_both_hosts():
    second = _card(1)
    second.host = "h9"
    judged = verdict(_card(), [_card(), _card(1)], "shared", None, twice={1: second})
    assert judged.refusal == "node 1 given twice: hosts h1 and h9 (give each node its own node_rank)"
    assert judged.refused_node == 1
    assert verdict(_card(), [_card(), _card(1)], "shared", None).refused_node is None
    # a second card from node 1's own host (a relaunch after a crash, or two launchers there)
    again = _card(1)
    same_host = verdict(_card(), [_card(), _card(1)], "shared", None, twice={1: again}).refusal
    assert same_host.startswith(f"node 1 given twice on host {again.host}: two launchers of that host, or node 1 "
                                "started again after it stopped")
