"""hyport_lib.models.training_inputs on hand-made tensors: what is per token, what is an
image tensor, how image tensors of any rank are joined, how packed M-RoPE rows are laid out."""

from __future__ import annotations

import pytest
import torch

from hyport_lib.models.training_inputs import join_image_tensors, packed_positions, split_processor_output
from hyport_lib.train.packing import PackedCollator, PaddedCollator
from hyport_lib.train.samples import Sample


def test_split_keeps_per_token_keys_apart_from_image_tensors():
    out = {"input_ids": torch.tensor([[5, 6, 7, 8]]), "attention_mask": torch.ones(1, 4, dtype=torch.long),
           "mm_token_type_ids": torch.tensor([[0, 1, 1, 0]]), "token_type_ids": torch.tensor([[0, 1, 1, 0]]),
           "pixel_values": torch.zeros(8, 12), "image_grid_thw": torch.tensor([[1, 2, 4]]),
           "pixel_attention_mask": torch.ones(1, 1, 4, 4, dtype=torch.bool)}
    ids, per_token, images = split_processor_output(out)
    assert ids == [5, 6, 7, 8]
    assert per_token == {"mm_token_type_ids": [0, 1, 1, 0], "token_type_ids": [0, 1, 1, 0]}
    assert set(images) == {"pixel_values", "image_grid_thw", "pixel_attention_mask"}


def test_rows_per_image_are_concatenated_on_dim_0():
    a = {"pixel_values": torch.ones(4, 6), "image_grid_thw": torch.tensor([[1, 2, 2]])}
    b = {"pixel_values": torch.full((8, 6), 2.0), "image_grid_thw": torch.tensor([[1, 2, 4]])}
    batch = join_image_tensors([a, b])
    assert batch["pixel_values"].shape == (12, 6) and batch["image_grid_thw"].tolist() == [[1, 2, 2], [1, 2, 4]]


def test_per_sample_5d_pixels_are_padded_with_zero_images_then_concatenated():
    """Idefics3 / LLaVA-OneVision: (sample, image or tile, C, H, W); the models drop
    all-zero images, so padding the image axis keeps every real image in order."""
    one = {"pixel_values": torch.ones(1, 1, 3, 4, 4), "pixel_attention_mask": torch.ones(1, 1, 4, 4, dtype=torch.bool),
           "image_sizes": torch.tensor([[4, 4]])}
    two = {"pixel_values": torch.full((1, 2, 3, 4, 4), 2.0),
           "pixel_attention_mask": torch.ones(1, 2, 4, 4, dtype=torch.bool), "image_sizes": torch.tensor([[4, 4]])}
    batch = join_image_tensors([one, two])
    assert batch["pixel_values"].shape == (2, 2, 3, 4, 4)
    assert batch["pixel_values"][0, 1].abs().sum() == 0 and (batch["pixel_values"][1] == 2).all()
    assert batch["pixel_attention_mask"].shape == (2, 2, 4, 4) and not batch["pixel_attention_mask"][0, 1].any()
    assert batch["image_sizes"].shape == (2, 2)  # not per-sample-major: plain concatenation


def test_a_key_only_some_samples_have_is_left_out():
    batch = join_image_tensors([{"pixel_values": torch.ones(1, 3)},
                                {"pixel_values": torch.ones(1, 3), "image_sizes": torch.tensor([[1, 1]])}])
    assert set(batch) == {"pixel_values"}


def _sample(n, rope=None, **extras):
    return Sample("s", list(range(1, n + 1)), list(range(1, n + 1)), token_extras=extras, rope_positions=rope)


def test_packed_mrope_rows_put_text_positions_first_and_pad_every_axis():
    a = _sample(3, rope=torch.tensor([[0, 1, 1], [0, 1, 2], [0, 2, 1]]))
    b = _sample(2, rope=torch.tensor([[0, 1], [0, 1], [0, 1]]))
    with_text = packed_positions([a, b], 7)
    assert with_text.tolist() == [[0, 1, 2, 0, 1, 0, 1], [0, 1, 1, 0, 1, 0, 1],
                                  [0, 1, 2, 0, 1, 0, 1], [0, 2, 1, 0, 1, 0, 1]]
    assert packed_positions([a, b], 7, text_row=False).tolist() == with_text[1:].tolist()


def test_collators_carry_per_token_keys_and_mrope_positions():
    a = _sample(3, rope=torch.zeros(3, 3, dtype=torch.long), mm_token_type_ids=[0, 1, 0])
    b = _sample(2, rope=torch.zeros(3, 2, dtype=torch.long), mm_token_type_ids=[1, 0])
    packed = PackedCollator(0, 8)([[a, b]])
    assert packed["mm_token_type_ids"].tolist() == [[0, 1, 0, 1, 0, 0, 0, 0]]
    assert packed["position_ids"].shape == (4, 1, 8)
    padded = PaddedCollator(0)([a, b])
    assert padded["mm_token_type_ids"].tolist() == [[0, 1, 0], [1, 0, 0]] and "position_ids" not in padded
    with pytest.raises(ValueError, match="mm_token_type_ids.*missing"):
        PaddedCollator(0)([a, _sample(2)])
