"""What the weight verifier can find (:mod:`hyport_lib.checkpoint_files.findings`): a finding
of a known class, its severity the class's unless given, a few tensors named, counted by
severity, errors first in the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyport_lib.checkpoint_files.findings import (CLASSES, FINDING_COLUMNS, SEVERITIES, Finding, counts,
                                                  findings_frame, name_some)


def test_every_class_has_a_severity_and_a_meaning():
    assert len(CLASSES) > 40
    assert all(severity in SEVERITIES and meaning for severity, meaning in CLASSES.values())


def test_a_finding_takes_its_class_severity_unless_given():
    made = Finding("key_added", Path("model.safetensors"), "one more", tensors=("a", "b"))
    assert (made.severity, made.file, made.tensors) == ("info", "model.safetensors", ["a", "b"])
    assert Finding("key_added", "m", "x", severity="warning").severity == "warning"
    assert made.to_dict() == {"class": "key_added", "file": "model.safetensors", "message": "one more",
                              "severity": "info", "tensors": ["a", "b"]}
    with pytest.raises(ValueError, match="unknown finding class 'no_such'"):
        Finding("no_such", "m", "x")
    with pytest.raises(ValueError, match="severity='fatal'"):
        Finding("key_added", "m", "x", severity="fatal")


def test_a_message_names_a_few_tensors():
    assert name_some(["a", "b"]) == "`a`, `b`"
    assert name_some(["a", "b", "c", "d", "e"]) == "`a`, `b`, `c` and 2 more"


def test_findings_are_counted_and_tabled_errors_first():
    found = [Finding("key_added", "m", "note"), Finding("shard_missing", "m", "error"),
             Finding("extra_shard", "m", "warn"), Finding("non_finite", "m", "error 2")]
    assert counts(found) == {"error": 2, "warning": 1, "info": 1}
    assert counts([]) == {"error": 0, "warning": 0, "info": 0}
    frame = findings_frame(found)
    assert list(frame.columns) == list(FINDING_COLUMNS)
    assert list(frame["severity"]) == ["error", "error", "warning", "info"]
    assert list(frame["message"][:2]) == ["error", "error 2"]  # in order within a severity
