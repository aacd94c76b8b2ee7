"""The one tolerance table and the one comparison of two runs (proof/tolerance.py): each
quantity judged in its dtype, and a NaN or an Inf on either side failing every one."""

from __future__ import annotations

import math

import pytest
import torch

from hyport_lib.proof.tolerance import (DECODING, GRADIENTS, LOGITS, LOSS, NOISE_FLOOR, NOISE_MARGIN, OUTPUTS,
                                        TOLERANCE, compare, noise_bound)

QUANTITIES = (LOGITS, DECODING, LOSS, GRADIENTS, OUTPUTS)


def test_a_nan_in_the_reference_is_no_pass():
    ref = torch.zeros(4)
    ref[0] = float("nan")
    outputs = compare(OUTPUTS, ref, torch.randn(4) * 100, "float32")
    assert not outputs.finite and not outputs.passed


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_nan_or_an_inf_on_either_side_fails_every_quantity(bad):
    good = torch.tensor([[0.5, -0.25, 1.0], [2.0, 0.0, -1.0]])
    broken = good.clone()
    broken[1, 2] = bad
    assert QUANTITIES
    for quantity in QUANTITIES:
        assert compare(quantity, good, good).passed, quantity  # the same values pass
        for reference, candidate in ((good, broken), (broken, good)):
            compared = compare(quantity, reference, candidate)
            assert not compared.finite and not compared.passed, quantity
            assert compared.max_abs == math.inf  # never a NaN, which every `>` lets through


def test_each_quantity_has_its_bound_and_scale():
    ref = torch.tensor([4.0, -2.0], dtype=torch.float64)
    assert compare(LOGITS, ref, ref + 9e-4).passed and not compare(LOGITS, ref, ref + 2e-3).passed
    # gradients: relative to the largest one (4 here)
    gradients = compare(GRADIENTS, ref, ref + 3e-3)
    assert gradients.scale == 4.0 and gradients.relative == pytest.approx(7.5e-4) and gradients.passed
    # a loss and outputs: relative to their magnitude above 1
    assert compare(LOSS, torch.tensor(0.5), torch.tensor(0.5 + 9e-5)).bound == pytest.approx(1e-4)
    assert compare(OUTPUTS, ref, ref).bound == pytest.approx(4e-4)
    # outputs also need the cosine: the same max |Δ| pointing the other way fails
    flipped = torch.tensor([1e-4, -1e-4])
    assert not compare(OUTPUTS, flipped, -flipped).passed
    # half precision is judged by its own row, and a quantity no proof compares there is refused
    assert compare(LOGITS, ref, ref + 0.2, "bfloat16").passed
    assert not compare(LOGITS, ref, ref + 0.2, "float32").passed
    with pytest.raises(ValueError, match="no tolerance for gradients in bfloat16"):
        compare(GRADIENTS, ref, ref, "bfloat16")
    assert set(TOLERANCE) == {"float32", "bfloat16", "float16"}


def test_parts_compare_as_their_whole():
    """A model's gradients compared parameter by parameter give the figures of one tensor."""
    generator = torch.Generator().manual_seed(0)
    parts = [torch.randn(3, 4, generator=generator), torch.randn(5, generator=generator)]
    moved = [part + 1e-4 * torch.randn(part.shape, generator=generator) for part in parts]
    whole = compare(GRADIENTS, torch.cat([p.flatten() for p in parts]), torch.cat([m.flatten() for m in moved]))
    piecewise = compare(GRADIENTS, parts, moved)
    assert piecewise.max_abs == whole.max_abs and piecewise.scale == whole.scale
    assert piecewise.cosine == pytest.approx(whole.cosine)
    with pytest.raises(ValueError):  # a part missing on one side is no comparison
        compare(GRADIENTS, parts, moved[:1])


def test_logits_say_their_top1_agreement_and_kl():
    ref = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    same = compare(LOGITS, ref, ref)
    assert same.top1 == 1.0 and same.kl == pytest.approx(0.0, abs=1e-12)
    flipped = compare(LOGITS, ref, ref.flip(-1))
    assert flipped.top1 == 0.5 and flipped.kl > 0.1


def test_a_measured_bound_replaces_the_tables_but_is_never_looser():
    reference = torch.zeros(4, 8)
    shifted = reference.clone()
    shifted[0, 0] = 5e-5  # inside the table's 1e-3, far outside float32's own error
    tight = compare(LOGITS, reference, shifted, measured_bound=1e-6)
    assert not tight.passed and tight.bound == 1e-6
    assert tight.differs("logits") == "logits differ from eager by 5e-05 (> 1e-06)"
    loose = compare(LOGITS, reference, shifted, measured_bound=1.0)
    assert loose.passed and loose.bound == TOLERANCE["float32"][LOGITS]


def test_the_noise_bound_is_a_margin_over_float32s_error_with_a_floor():
    assert noise_bound(2e-7, 1.0) == pytest.approx(NOISE_MARGIN * 2e-7)
    assert noise_bound(0.0, 10.0) == pytest.approx(NOISE_FLOOR * 10.0) and NOISE_FLOOR > 0
