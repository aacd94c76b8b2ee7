"""One host's versions fingerprint (hyport_lib/nodes/versions.py): packages, CANN from its
install file, the HCCL variables without secrets; what two nodes compare."""

from __future__ import annotations

from hyport_lib.nodes.versions import differences, versions_fingerprint


def test_the_fingerprint_reads_cann_and_keeps_hccl_variables_but_never_a_secret(tmp_path):
    (tmp_path / "ascend_toolkit_install.info").write_text("version=8.0.RC3\n")
    found = versions_fingerprint({"ASCEND_HOME_PATH": str(tmp_path), "HCCL_SOCKET_IFNAME": "eth0",
                                  "HCCL_IF_IP": "10.0.0.1", "HCCL_AUTH_TOKEN": "s3cret"})
    assert found["CANN"] == "8.0.RC3" and found["torch"] and found["python"]
    assert found["HCCL_SOCKET_IFNAME"] == "eth0" and found["HCCL_IF_IP"] == "10.0.0.1"
    assert "HCCL_AUTH_TOKEN" not in found and "s3cret" not in str(found)
    assert {"torch_npu", "transformers", "deepspeed", "driver", "firmware"} <= set(found)


def test_differences_leave_out_each_hosts_own_address():
    ours = {"torch": "2.13", "CANN": "8.0.RC3", "HCCL_IF_IP": "10.0.0.1", "HCCL_SOCKET_IFNAME": "eth0"}
    theirs = {"torch": "2.13", "CANN": "8.1.RC1", "HCCL_IF_IP": "10.0.0.2"}
    assert differences(ours, theirs) == [("CANN", "8.0.RC3", "8.1.RC1"), ("HCCL_SOCKET_IFNAME", "eth0", None)]
    assert differences(ours, dict(ours, HCCL_IF_IP="10.9.9.9")) == []
