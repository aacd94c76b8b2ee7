"""Parameter values read strictly (hyport_lib/utils/values.py): what papermill, YAML and the
command line give, each error naming the parameter."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from hyport_lib.utils.values import as_flag, as_float, as_int, from_known_keys


def test_an_integer_is_read_from_text_and_integral_floats_only():
    assert as_int("n", "16") == 16 and as_int("n", " 16.0 ") == 16 and as_int("n", "1e3") == 1000
    assert as_int("n", 4.0) == 4
    for bad, said in (("2.5", "not a fraction"), (True, "expected an integer"), ("many", "expected an integer"),
                      (math.inf, "not a fraction"), (None, "expected an integer")):
        with pytest.raises(ValueError, match=f"n=.*: .*{said}"):
            as_int("n", bad)


def test_a_float_is_finite_and_never_a_flag():
    assert as_float("lr", "1e-4") == 1e-4 and as_float("lr", 3) == 3.0
    for bad, said in (("nan", "a finite number"), (math.inf, "a finite number"), (False, "a number"),
                      ("fast", "a number"), ([1], "a number")):
        with pytest.raises(ValueError, match=f"lr=.*: expected {said}"):
            as_float("lr", bad)


def test_a_flag_is_read_from_its_words_and_the_word_false_is_false():
    assert as_flag("f", "false") is False and as_flag("f", " YES ") is True and as_flag("f", 0) is False
    assert as_flag("f", True) is True and as_flag("f", "1") is True
    for bad in ("maybe", 2, None):
        with pytest.raises(ValueError, match="f=.*: expected true/false"):
            as_flag("f", bad)


def test_a_misspelt_key_of_a_saved_config_is_named_not_dropped():
    @dataclass
    class Config:
        top_k: int = 1
        temperature: float = 1.0

    assert from_known_keys(Config, {"top_k": 5}) == Config(top_k=5)
    with pytest.raises(ValueError, match=r"Config: unknown key\(s\) \['topk'\]; known: \['temperature', 'top_k'\]"):
        from_known_keys(Config, {"topk": 5})
