"""The one stage command's progress bar (hyport_lib/commands/_stage.py); its flags, plan,
record and exit status are checked for every stage by tests/test_stage_contract.py and
tests/commands/test_cli.py."""

from __future__ import annotations

import io
import os
from types import SimpleNamespace

import pytest

from hyport_lib.commands._stage import ProgressWriter


@pytest.fixture
def terminal():
    """A pseudo-terminal's writing end, and a function reading what it was sent."""
    leader, follower = os.openpty()
    stream = os.fdopen(follower, "w", encoding="utf-8")

    def shown() -> str:
        stream.flush()
        return os.read(leader, 65536).decode("utf-8", "replace")

    try:
        yield stream, shown
    finally:
        stream.close()
        os.close(leader)


def test_on_a_terminal_a_bar_per_phase_counts_what_the_stage_reports_and_shows_its_postfix(terminal):
    stream, shown = terminal
    bar = ProgressWriter("weights", "B", total=lambda p: p.total, done=lambda p: p.done,
                         phase=lambda p: p.phase, postfix=lambda p: p.note, stream=stream)
    bar(SimpleNamespace(total=10, done=4, phase="scan", note="model.safetensors"))
    first = bar.bar
    bar(SimpleNamespace(total=10, done=10, phase="scan", note=""))
    assert bar.bar is first and first.n == 10
    bar(SimpleNamespace(total=5, done=1, phase="reload", note=""))
    assert bar.bar is not first and bar.bar.total == 5 and bar.bar.n == 1
    bar.close()
    assert bar.bar is None
    err = shown()
    assert "reload" in err and "model.safetensors" in err
    assert "\rscan: 100%" in err  # redrawn in place, after a carriage return


class _Clock:
    """A clock the test moves: the writer's interval judged without sleeping."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_into_a_log_the_progress_is_a_plain_line_every_few_seconds_never_a_redraw():
    log, clock = io.StringIO(), _Clock()
    writer = ProgressWriter("cards", "card", total=lambda p: p.total, done=lambda p: p.done,
                            postfix=lambda p: p.note, stream=log, clock=clock)
    updates = 0
    for step in range(1000):  # 1,000 updates over 50 s, the last one finishing
        clock.now = step * 0.05
        writer(SimpleNamespace(total=1000, done=step + 1, note=f"{step + 1} ok"))
        updates += 1
    writer(SimpleNamespace(total=1000, done=1000, note="1000 ok"))  # the grid's last word, said already
    writer.close()
    text = log.getvalue()
    lines = text.splitlines()
    assert updates == 1000 and "\r" not in text and writer.bar is None
    # the first, one per 5 s of the 50, the last: at most 12 lines for 1,000 updates
    assert 2 <= len(lines) <= 12, lines
    assert lines[0] == "cards: 1 of 1,000 cards (0%), 0s, 1 ok"
    assert lines[-1] == "cards: 1,000 of 1,000 cards (100%), 50s, 1000 ok"


def test_into_a_log_a_phase_closed_early_says_its_last_state_and_bytes_read_in_decimal_units():
    log, clock = io.StringIO(), _Clock()
    writer = ProgressWriter("weights", "B", total=lambda p: p.total, done=lambda p: p.done,
                            phase=lambda p: p.phase, unit_scale=True, stream=log, clock=clock)
    writer(SimpleNamespace(total=15_200_000_000, done=0, phase="scan"))
    clock.now = 1.0
    writer(SimpleNamespace(total=15_200_000_000, done=2_500_000_000, phase="scan"))  # within 5 s: held
    assert log.getvalue().count("\n") == 1
    writer(SimpleNamespace(total=0, done=0, phase="reload"))  # a new phase: the scan's last state first
    writer.close()
    assert log.getvalue().splitlines() == [
        "scan: 0 B of 15.2 GB (0%), 0s", "scan: 2.5 GB of 15.2 GB (16%), 1s", "reload, 0s"]
