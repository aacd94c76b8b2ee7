"""``hyport env --compare A.json B.json``: two hosts' stage-01 records field by field."""

from __future__ import annotations

import json

from hyport_lib.commands import main
from hyport_lib.environment import stage
from hyport_lib.devices.ascend_versions import CannFacts
from hyport_lib.environment.host_compare import compare_hosts, read_environment_record
from hyport_lib.environment.multinode import NodeFacts
from hyport_lib.nodes.versions import differences
from hyport_lib.results import Check, record


def host_record(folder, host: str, cann: str, env_vars: dict) -> str:
    report = stage.EnvironmentReport(
        system={"os": "EulerOS 2.0", "kernel": "5.10"},
        versions={"python": "3.11.7", "torch": "2.6.0", "torch_npu": "2.6.0", "transformers": "4.57.1",
                  "deepspeed": "0.16.4", "accelerate": "1.10.0"},
        cann=CannFacts(version=cann, driver_version="24.1.rc3"), devices=[], env_vars=env_vars,
        checks=[Check("backend", "PASS", "npu backend, 8 cards")], nodes=NodeFacts(host_name=host), device="npu",
        num_cards=8)
    return str(record(stage, report, directory=folder))


def two_hosts(tmp_path, b_cann="8.0.RC3", b_buffsize="200"):
    a = host_record(tmp_path / "a", "node-a", "8.0.RC3", {"HCCL_BUFFSIZE": "200", "HCCL_IF_IP": "10.0.0.1"})
    b = host_record(tmp_path / "b", "node-b", b_cann, {"HCCL_BUFFSIZE": b_buffsize, "HCCL_IF_IP": "10.0.0.2"})
    return a, b


def test_two_hosts_that_differ_in_cann_and_an_hccl_variable_exit_1(tmp_path, capsys):
    a, b = two_hosts(tmp_path, b_cann="8.1.RC1", b_buffsize="400")
    comparison = compare_hosts(read_environment_record(a), read_environment_record(b), a, b)
    assert [(r.field, r.a, r.b) for r in comparison.mismatched] == [("CANN", "8.0.RC3", "8.1.RC1"),
                                                                   ("HCCL_BUFFSIZE", "200", "400")]
    per_host = next(r for r in comparison.rows if r.field == "HCCL_IF_IP")
    assert per_host.differs and not per_host.must_match
    assert main(["env", "--compare", a, b]) == 1
    out = capsys.readouterr().out
    assert "host A (node-a)" in out and "host B (node-b)" in out
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith(("≠", "~"))}
    assert set(rows) == {"CANN", "HCCL_BUFFSIZE", "HCCL_IF_IP"}
    assert rows["CANN"].startswith("≠") and "8.0.RC3" in rows["CANN"] and "8.1.RC1" in rows["CANN"]
    assert rows["HCCL_IF_IP"].startswith("~")
    assert "2 of the fields every node must share differ: CANN, HCCL_BUFFSIZE" in out


def test_two_hosts_that_agree_exit_0(tmp_path, capsys):
    a, b = two_hosts(tmp_path)
    assert main(["env", "--compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "all 10 fields every node must share agree (~ marks a difference allowed between hosts)" in out
    assert "≠" not in out


def test_a_bad_file_exits_2_with_one_line_naming_it(tmp_path, capsys):
    a, _ = two_hosts(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["env", "--compare", a, str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hyport env: {bad}: not a valid hyport result")
    other = tmp_path / "train.json"
    raw = json.loads(open(a).read())
    other.write_text(json.dumps({**raw, "stage": "04_train"}))
    assert main(["env", "--compare", str(other), a]) == 2
    assert f"{other}: a 04_train record, not 01_environment's" in capsys.readouterr().err


def test_env_compare_and_the_handshake_read_one_list(tmp_path):
    """Each host's own interface and address may differ; any other HCCL variable must match, in
    ``hyport env --compare`` as in stage 04's handshake (hyport_lib/nodes/versions.py)."""
    a_vars = {"HCCL_SOCKET_IFNAME": "=eth0", "HCCL_IF_IP": "10.0.0.1", "HCCL_RDMA_TC": "132", "HCCL_BUFFSIZE": "200"}
    b_vars = {"HCCL_SOCKET_IFNAME": "=enp1s0", "HCCL_IF_IP": "10.0.0.2", "HCCL_RDMA_TC": "160", "HCCL_BUFFSIZE": "200"}
    a = read_environment_record(host_record(tmp_path / "a", "node-a", "8.0.RC3", a_vars))
    b = read_environment_record(host_record(tmp_path / "b", "node-b", "8.0.RC3", b_vars))
    comparison = compare_hosts(a, b)
    compared = {r.field for r in comparison.rows if r.must_match and r.field.startswith("HCCL_")}
    assert {r.field for r in comparison.mismatched} == {"HCCL_RDMA_TC"}
    assert [name for name, _, _ in differences(a_vars, b_vars)] == ["HCCL_RDMA_TC"]
    assert {"HCCL_SOCKET_IFNAME", "HCCL_IF_IP"}.isdisjoint(compared) and "HCCL_BUFFSIZE" in compared
