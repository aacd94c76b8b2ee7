"""The report as text and JSON: nothing secret in either."""

from __future__ import annotations

import json

from hyport_lib.environment import stage

from .test_stage import _collect


SECRETS = {"HCCL_AUTH_TOKEN": "tok-1234567", "ASCEND_ACCESS_KEY": "ak-7654321",
           "NCCL_PASSWORD": "pw-abcdefg", "DS_SECRET": "sec-9999999", "MASTER_CREDENTIAL": "cred-8888"}


def test_report_never_contains_secrets(monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "600")
    report = _collect(device="cpu", check_ports=False)
    assert report.env_vars["HCCL_CONNECT_TIMEOUT"] == "600"
    outputs = [stage.report_text(report), json.dumps(report.to_dict(), default=str)]
    for text in outputs:
        for key, value in SECRETS.items():
            assert key not in text and value not in text
