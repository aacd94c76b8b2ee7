"""A triage recorded and drawn: the JSON round trip, the table and the Markdown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hyport_lib.triage import Triage, triage, triage_frame, triage_markdown

from .test_catalogue import _json


LOGS = Path(__file__).parents[1] / "data" / "npu_logs"


def test_json_round_trips_through_triage_from_dict(capsys):
    code, data = _json(capsys, LOGS / "hccl_connect_timeout.llama-factory-5071.log",
                       LOGS / "npu_oom.vllm-ascend-1127.log")
    again = Triage.from_dict(data)
    assert again.to_dict() == data and code == 1
    assert again.summary_line() == triage([LOGS / "hccl_connect_timeout.llama-factory-5071.log",
                                          LOGS / "npu_oom.vllm-ascend-1127.log"]).summary_line()
    broken = dict(data, findings=[{k: v for k, v in data["findings"][0].items() if k != "title"}])
    with pytest.raises(ValueError, match="triage findings: missing field.*title"):
        Triage.from_dict(broken)
    # down to a finding's places, and the lines no entry explains
    finding = data["findings"][0]
    placeless = dict(data, findings=[dict(finding, places=[{"line": 1}])])
    with pytest.raises(ValueError, match="triage findings places: missing field.*file"):
        Triage.from_dict(placeless)
    with pytest.raises(ValueError, match="triage unrecognised: expected a dict"):
        Triage.from_dict(dict(data, unrecognised=["E39999"]))
    with pytest.raises(ValueError, match="triage findings: expected a list, got str"):
        Triage.from_dict(dict(data, findings="not a list"))


def test_frame_and_markdown_show_findings_and_unrecognised_lines(tmp_path):
    odd = tmp_path / "odd.log"
    odd.write_text("E39999: Inner Error!\n", encoding="utf-8")
    result = triage([LOGS / "hccl_exec_timeout.vllm-ascend-382.log", odd])
    frame = triage_frame(result)
    assert list(frame["kind"]) == ["error", "not recognised"]
    assert frame.iloc[0]["where"].endswith("hccl_exec_timeout.vllm-ascend-382.log:1")
    markdown = "\n".join(triage_markdown(result))
    assert "**Failure: HCCL collective timed out**" in markdown
    assert "*What to do:*" in markdown and "HCCL_EXEC_TIMEOUT" in markdown
    assert "**Not recognised:**" in markdown and "1: E39999: Inner Error!" in markdown
    assert re.search(r"^```text$", markdown, re.M)
