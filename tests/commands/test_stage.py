"""The one stage command's progress bar (hyport_lib/commands/_stage.py); its flags, plan,
record and exit status are checked for every stage by tests/test_stage_contract.py and
tests/commands/test_cli.py."""

from __future__ import annotations

from types import SimpleNamespace

from hyport_lib.commands._stage import TerminalBar


def test_a_bar_per_phase_counts_what_the_stage_reports_and_shows_its_postfix(capsys):
    bar = TerminalBar("weights", "B", total=lambda p: p.total, done=lambda p: p.done,
                      phase=lambda p: p.phase, postfix=lambda p: p.note)
    bar(SimpleNamespace(total=10, done=4, phase="scan", note="model.safetensors"))
    first = bar.bar
    bar(SimpleNamespace(total=10, done=10, phase="scan", note=""))
    assert bar.bar is first and first.n == 10
    bar(SimpleNamespace(total=5, done=1, phase="reload", note=""))
    assert bar.bar is not first and bar.bar.total == 5 and bar.bar.n == 1
    bar.close()
    assert bar.bar is None
    err = capsys.readouterr().err
    assert "scan" in err and "reload" in err and "model.safetensors" in err
