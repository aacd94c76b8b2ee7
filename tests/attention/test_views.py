"""Stage 02's parts told in the notebook and the report alike (attention/views.py): the
behaviour on flat logits said in one line."""

from __future__ import annotations

from blog_drafts import stage_draft

from hyport_lib.attention.views import behaviour_glance_row
from hyport_lib.proof.behaviour import Behaviour
from hyport_lib.utils.typed_records import from_mapping


def test_behaviour_on_flat_logits_is_not_meaningful_and_is_drawn_in_one_line(tmp_path):
    """A random-weight model other than the tiny one is recognised by its flat logits."""
    record = {"behaviour": {"meaningful": False, "why": "random weights: not meaningful (flat logits)"}}
    flat = from_mapping(Behaviour, record["behaviour"])
    assert behaviour_glance_row(flat) == [("behaviour", "random weights: not meaningful (flat logits)")]
    text = stage_draft(tmp_path, "02_attention", {"model": record})
    assert "\nBehaviour (greedy answers, perplexity) not compared: random weights" in text
    real = {"behaviour": {"meaningful": True, "new_tokens": 32, "prompts": ["Capital?"],
                          "eager_answers": ["Paris."], "top1_probability": 0.6, "pairs": [
                              {"label": "hyport_npu_emulated, float32", "dtype": "float32", "identical": True,
                               "answers": ["Paris."], "perplexity": 4.77, "eager_perplexity": 4.77},
                              {"label": "NPU emulation, bfloat16", "dtype": "bfloat16", "identical": False,
                               "answers": ["Lyon."], "perplexity": 4.8, "eager_perplexity": 4.82,
                               "first_difference": {"prompt": 0, "token": 0, "eager": "Paris", "swapped": "Lyon"}}]}}
    said = behaviour_glance_row(from_mapping(Behaviour, real["behaviour"]))[0][1]
    assert said.startswith("32-token answers: hyport_npu_emulated, float32: identical; NPU emulation")
    assert "prompt 0, token 0: 'Paris' → 'Lyon'" in said
    text = stage_draft(tmp_path, "02_attention", {"model": real}, "zh")
    assert "Paris." in text and "4.82 → 4.8" in text


def test_a_pair_whose_swap_was_never_called_is_said_not_compared(tmp_path):
    """Not "identical": the answers of a swap never called are eager's own."""
    record = {"behaviour": {"meaningful": True, "new_tokens": 32, "prompts": ["Capital?"],
                            "eager_answers": ["Paris."], "top1_probability": 0.6, "pairs": [
                                {"label": "hyport_npu_emulated, float32", "dtype": "float32", "identical": False,
                                 "swapped_calls": 0, "not_compared": "not compared: the swap was never called"}]}}
    said = behaviour_glance_row(from_mapping(Behaviour, record["behaviour"]))[0][1]
    assert said == "32-token answers: hyport_npu_emulated, float32: not compared: the swap was never called"
    text = stage_draft(tmp_path, "02_attention", {"model": record})
    (row,) = [line for line in text.splitlines() if line.startswith("| `hyport_npu_emulated, float32`")]
    assert "not compared: the swap was never called" in row and "| no |" not in row and "| yes |" not in row
