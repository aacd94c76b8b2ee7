"""One host's versions fingerprint (hyport_lib/nodes/versions.py): packages, CANN from its
install file, the HCCL variables without secrets; what two nodes compare."""

from __future__ import annotations

from hyport_lib.nodes.versions import HCCL_MUST_MATCH, HCCL_PER_HOST, differences, versions_fingerprint


def test_the_fingerprint_reads_cann_and_keeps_hccl_variables_but_never_a_secret(tmp_path):
    (tmp_path / "ascend_toolkit_install.info").write_text("version=8.0.RC3\n")
    found = versions_fingerprint({"ASCEND_HOME_PATH": str(tmp_path), "HCCL_SOCKET_IFNAME": "eth0",
                                  "HCCL_IF_IP": "10.0.0.1", "HCCL_AUTH_TOKEN": "s3cret"})
    assert found["CANN"] == "8.0.RC3" and found["torch"] and found["python"]
    assert found["HCCL_SOCKET_IFNAME"] == "eth0" and found["HCCL_IF_IP"] == "10.0.0.1"
    assert "HCCL_AUTH_TOKEN" not in found and "s3cret" not in str(found)
    assert {"torch_npu", "transformers", "deepspeed", "driver", "firmware"} <= set(found)


def test_differences_leave_out_each_hosts_own_interface_address_and_whitelist():
    ours = {"torch": "2.13", "CANN": "8.0.RC3", "HCCL_IF_IP": "10.0.0.1", "HCCL_SOCKET_IFNAME": "=eth0",
            "HCCL_WHITELIST_FILE": "/etc/a.json", "HCCL_RDMA_TC": "132"}
    theirs = {"torch": "2.13", "CANN": "8.1.RC1", "HCCL_IF_IP": "10.0.0.2", "HCCL_SOCKET_IFNAME": "=enp1s0",
              "HCCL_RDMA_TC": "160"}
    # An HCCL variable on neither list (HCCL_RDMA_TC) must match: only a host's own may differ.
    assert differences(ours, theirs) == [("CANN", "8.0.RC3", "8.1.RC1"), ("HCCL_RDMA_TC", "132", "160")]
    assert differences(ours, dict(ours, HCCL_IF_IP="10.9.9.9", HCCL_SOCKET_IFNAME="ib0")) == []
    assert set(HCCL_PER_HOST).isdisjoint(HCCL_MUST_MATCH)


def test_the_fingerprints_hccl_values_are_scrubbed_of_secrets(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_SeCrEtVaLuE123")
    found = versions_fingerprint({"HCCL_WHITELIST_FILE": "login admin password hunter2hunter2",
                                  "HCCL_CONN_URL": "x hf_SeCrEtVaLuE123", "HCCL_BUFFSIZE": "200"})
    assert found["HCCL_BUFFSIZE"] == "200" and "HCCL_CONN_URL" in found
    assert "hunter2hunter2" not in str(found) and "hf_SeCrEtVaLuE123" not in str(found)
