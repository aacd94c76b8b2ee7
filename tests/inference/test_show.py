"""Stage 03 in the notebook (inference/show.py) while its cards run: each card's seconds on
one line, each card's log tail live (a hung card shows its log at once, not at
infer_timeout_s)."""

from __future__ import annotations

import pandas as pd

from hyport_lib.inference.show import grid_progress_line, live_log_tails
from hyport_lib.inference.grid import COLUMNS, GridProgress


def _progress(tmp_path, running=True):
    rows = []
    for card, status in ((0, "ok"), (1, "running"), (2, "skipped-busy")):
        row = {c: None for c in COLUMNS}
        log = tmp_path / f"card{card}.log"
        if status != "skipped-busy":
            log.write_text("".join(f"card {card} line {i} <b>\n" for i in range(30)))
            row["log_path"] = str(log)
        row.update(card=card, status=status)
        rows.append(row)
    return GridProgress(pd.DataFrame(rows, columns=COLUMNS), done=2, total=3,
                        elapsed_s={1: 12.4} if running else {}, running=running)


def test_each_launched_cards_log_is_shown_the_running_ones_open(tmp_path):
    shown = live_log_tails(_progress(tmp_path), lines=5)
    assert shown.count("<details") == 2  # the busy card, never launched, has no log
    card0, card1 = shown.split("</details>")[:2]
    assert "<details class='hyport-card-log'>" in card0 and "card 0: ok" in card0
    assert "<details class='hyport-card-log' open>" in card1 and "card 1: running 12 s" in card1
    assert "card 1 line 29 &lt;b&gt;" in card1 and "card 1 line 24" not in card1  # the tail, escaped


def test_the_line_names_each_running_cards_seconds_and_how_it_ended(tmp_path):
    assert grid_progress_line(_progress(tmp_path)) == "2/3 cards finished; running: card 1 (12 s)"
    ended = _progress(tmp_path, running=False)
    assert grid_progress_line(ended) == "2/3 cards finished (finished)"
    stopped = GridProgress(ended.frame, 2, 3, running=False, stopped=True)
    assert grid_progress_line(stopped).endswith("(interrupted: the cards that finished are kept)")


def test_a_stopped_grid_counts_its_finished_stopped_and_not_started_cards_apart():
    frame = pd.DataFrame([{**{c: None for c in COLUMNS}, "card": card, "status": status}
                          for card, status in ((0, "interrupted"), (1, "interrupted"))], columns=COLUMNS)
    stopped = GridProgress(frame, 0, 2, running=False, stopped=True)
    assert grid_progress_line(stopped) == "0/2 cards finished, 2 stopped (interrupted: the cards that finished are kept)"
    frame.loc[1, "status"], frame.loc[0, "status"] = "not-started", "ok"
    assert grid_progress_line(GridProgress(frame, 1, 2, running=False, stopped=True)) == \
        "1/2 cards finished, 1 not started (interrupted: the cards that finished are kept)"
