"""Recorded values as the drafts and the index cards write them (hyport_lib/drafting/values.py):
the rules the drafts' number check re-derives every figure with."""

from __future__ import annotations

import math

from hyport_lib.drafting.values import MISSING, fmt_value, is_number, num, ratio


def test_integers_are_written_as_recorded_with_separators_from_ten_thousand():
    assert num(9999) == "9999" and num(288536) == "288,536" and num(-12000) == "-12,000"


def test_a_short_float_is_written_as_recorded_a_long_one_rounded_never_in_e_notation():
    assert num(0.125) == "0.125" and num(1e-07) == "1e-07"
    assert num(0.123456789) == "0.1235" and num(12345.678) == "12,345.7"
    assert "e+" not in num(123456789.5)
    assert num(math.nan) == "nan" and num(math.inf) == "inf"


def test_nothing_recorded_is_a_dash_a_flag_a_word_and_a_text_is_never_cut():
    assert num(None) == fmt_value(None) == MISSING
    assert num(True) == "True" and fmt_value(True) == "yes" and fmt_value(False) == "no"
    assert num("2048x2048") == fmt_value("2048x2048") == "2048x2048"


def test_a_card_rounds_every_float_the_drafts_only_long_ones():
    assert fmt_value(0.12345) == "0.1235" and num(0.12345) == "0.12345"
    assert fmt_value(0.12345, digits=2) == "0.12" and fmt_value(23456.789) == "23,456.8"
    assert fmt_value(math.inf) == "inf"
    assert ratio(2 / 3) == "0.667"


def test_a_flag_is_no_figure():
    assert is_number(3) and is_number(0.5) and not is_number(True) and not is_number("3")
