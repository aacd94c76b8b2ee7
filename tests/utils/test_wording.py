"""hyport_lib/utils/wording.py: a count and its noun agree."""

from __future__ import annotations

from hyport_lib.utils.wording import counted, plural


def test_a_count_and_its_noun_agree():
    assert [counted(n, "card") for n in (0, 1, 2)] == ["0 cards", "1 card", "2 cards"]
    assert counted(1, "worker process") == "1 worker process" and counted(3, "process") == "3 processes"
    assert counted(1234, "tensor") == "1,234 tensors" and counted(2, "index", "indices") == "2 indices"
    assert plural("is", 1, "are") == "is" and plural("is", 2, "are") == "are"
