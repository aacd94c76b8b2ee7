"""hyport_lib.models.training_inputs on hand-made tensors: what is per token (of any
rank), what is an image tensor, how per-token tensors and image tensors of any rank are
padded and joined, how packed M-RoPE rows are laid out. (The same on the zoo's mllama, and
what its model computes from them: tests/train/test_zoo_training.py.)"""

from __future__ import annotations

import pytest
import torch

from hyport_lib.models.training_inputs import (join_image_tensors, packed_positions, rows_seeing_images,
                                               split_processor_output, token_tensor)
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


def _cross_mask(length, images, tiles, seen):
    """(1, length, images, tiles) int64: 1 from token ``start`` on for the first ``n``
    tiles of image ``i``, for each ``(i, start, n)`` of ``seen`` (the processor's layout)."""
    mask = torch.zeros(1, length, images, tiles, dtype=torch.long)
    for image, start, count in seen:
        mask[0, start:, image, :count] = 1
    return mask


def test_per_token_tensors_of_any_rank_are_per_token():
    """A key whose dim 1 runs along the tokens is per token whatever its rank (mllama's
    (1, S, images, tiles) cross_attention_mask); an integer image tensor whose dim 1
    counts images or tiles is not, nor are float pixels."""
    out = {"input_ids": torch.tensor([[5, 6, 7, 8, 9]]), "cross_attention_mask": _cross_mask(5, 1, 2, [(0, 2, 1)]),
           "aspect_ratio_ids": torch.tensor([[1]]), "aspect_ratio_mask": torch.tensor([[[1, 0]]]),
           "pixel_values": torch.zeros(1, 1, 2, 3, 4, 4), "floats_along_tokens": torch.zeros(1, 5, 3)}
    ids, per_token, images = split_processor_output(out)
    assert ids == [5, 6, 7, 8, 9] and list(per_token) == ["cross_attention_mask"]
    assert per_token["cross_attention_mask"] == [[[0, 0]], [[0, 0]], [[1, 0]], [[1, 0]], [[1, 0]]]
    assert set(images) == {"aspect_ratio_ids", "aspect_ratio_mask", "pixel_values", "floats_along_tokens"}


def test_an_image_processors_key_is_an_image_tensor_even_when_it_runs_as_long_as_the_sample():
    """Gemma-4's image_position_ids (images, max_patches, 2) beside a sample exactly as long
    as max_patches: the image processor names the key, so it is never taken per token."""
    from types import SimpleNamespace

    from hyport_lib.models.training_inputs import image_processor_keys

    processor = SimpleNamespace(image_processor=SimpleNamespace(
        model_input_names=["pixel_values", "image_position_ids"]))
    keys = image_processor_keys(processor)
    out = {"input_ids": torch.arange(6).unsqueeze(0), "pixel_values": torch.zeros(1, 6, 3),
           "image_position_ids": torch.zeros(1, 6, 2, dtype=torch.long)}
    assert "image_position_ids" in split_processor_output(out)[1]  # the shape alone misleads
    _, per_token, images = split_processor_output(out, keys)
    assert per_token == {} and set(images) == {"pixel_values", "image_position_ids"}
    assert image_processor_keys(SimpleNamespace()) == frozenset()


def test_per_token_tensors_are_padded_on_every_dim_with_zeros():
    """Rows of different lengths and trailing sizes: each sample's values sit at its own
    tokens and its own images/tiles; padding tokens, padding images and tiles, and a
    sample without the key (text-only: its processor returns no mask) are 0."""
    one = _cross_mask(4, 1, 1, [(0, 1, 1)])[0].tolist()             # 1 image of 1 tile
    two = _cross_mask(3, 2, 2, [(0, 0, 2), (1, 2, 1)])[0].tolist()  # 2 images, 2 tiles
    out = token_tensor("cross_attention_mask", [[(4, one)], [(3, two)], [(2, None)]], 5)
    assert out.shape == (3, 5, 2, 2) and out.dtype == torch.long
    assert out[0, :4, 0, 0].tolist() == [0, 1, 1, 1] and out[0, :, 1].sum() == 0 and out[0, :, :, 1].sum() == 0
    assert out[1, :3].tolist() == [[[1, 1], [0, 0]], [[1, 1], [0, 0]], [[1, 1], [1, 0]]]
    assert out[0, 4:].sum() == 0 and out[1, 3:].sum() == 0 and out[2].sum() == 0
    # packed: two samples end to end in one row, the padding after them
    row = token_tensor("cross_attention_mask", [[(4, one), (3, two)]], 8)
    assert row[0, :4, :1, :1].tolist() == torch.tensor(one).tolist() and row[0, 4:7].tolist() == out[1, :3].tolist()
    assert row[0, 7].sum() == 0
    # a key of one value per token: every sample's processor returns it, so a gap is an error
    with pytest.raises(ValueError, match="token_type_ids.*missing"):
        token_tensor("token_type_ids", [[(2, [0, 1])], [(2, None)]], 2)


def test_per_sample_6d_images_are_padded_per_image_and_tile_and_give_text_rows_padding_images():
    """mllama: (sample, image, tile, C, H, W) pixels, (sample, image) aspect ratio ids and
    (sample, image, tile) masks pad images and tiles with zeros; per row, a text-only
    sample gets a row of padding images (id 0, every tile masked), so row r of the
    images is row r of the text."""
    one = {"pixel_values": torch.ones(1, 1, 2, 3, 4, 4), "aspect_ratio_ids": torch.tensor([[1]]),
           "aspect_ratio_mask": torch.tensor([[[1, 0]]])}
    two = {"pixel_values": torch.full((1, 2, 2, 3, 4, 4), 2.0), "aspect_ratio_ids": torch.tensor([[2, 1]]),
           "aspect_ratio_mask": torch.tensor([[[1, 1], [1, 0]]])}
    batch = join_image_tensors([one, {}, two], per_row=True)
    assert batch["pixel_values"].shape == (3, 2, 2, 3, 4, 4)
    assert (batch["pixel_values"][0, 0] == 1).all() and batch["pixel_values"][0, 1].abs().sum() == 0
    assert batch["pixel_values"][1].abs().sum() == 0 and (batch["pixel_values"][2] == 2).all()
    assert batch["aspect_ratio_ids"].tolist() == [[1, 0], [0, 0], [2, 1]]
    assert batch["aspect_ratio_mask"].tolist() == [[[1, 0], [0, 0]], [[0, 0], [0, 0]], [[1, 1], [1, 0]]]
    # without per_row the text-only sample has no image rows (the LLaVA-style layout)
    assert join_image_tensors([one, {}, two])["pixel_values"].shape == (2, 2, 2, 3, 4, 4)
    with pytest.raises(ValueError, match="not laid out per sample"):
        join_image_tensors([{"pixel_values": torch.ones(4, 6)}, {}], per_row=True)


def _mllama_like(n, seen=None, pixels=1.0):
    extras = {} if seen is None else {"cross_attention_mask": _cross_mask(n, 1, 2, seen)[0].tolist()}
    sample = Sample("s", list(range(1, n + 1)), list(range(1, n + 1)), token_extras=extras)
    if seen is not None:
        sample.pixel_values = torch.full((1, 1, 2, 3, 4, 4), pixels)
        sample.image_extras = {"aspect_ratio_ids": torch.tensor([[1]]), "aspect_ratio_mask": torch.tensor([[[1, 0]]])}
    return sample


def test_collators_give_every_row_its_images_and_refuse_packing_samples_that_share_them():
    a, b, text = _mllama_like(4, [(0, 1, 1)]), _mllama_like(3, [(0, 0, 2)], 2.0), _mllama_like(2)
    padded = PaddedCollator(0)([a, text, b])
    assert padded["cross_attention_mask"].shape == (3, 4, 1, 2)
    assert padded["cross_attention_mask"][:, :, 0].sum(-1).tolist() == [[0, 1, 1, 1], [0, 0, 0, 0], [2, 2, 2, 0]]
    assert padded["pixel_values"].shape[0] == 3 and padded["pixel_values"][1].abs().sum() == 0
    assert padded["aspect_ratio_ids"].tolist() == [[1], [0], [1]]
    assert rows_seeing_images(padded).tolist() == [True, False, True]
    # one sample per packed row: the same layout, padded to max_seq_len
    packed = PackedCollator(0, 6)([[a], [text], [b]])
    assert packed["cross_attention_mask"].shape == (3, 6, 1, 2) and packed["pixel_values"].shape[0] == 3
    assert torch.equal(packed["cross_attention_mask"][:, :4], padded["cross_attention_mask"])
    # several samples in a row would see each other's images: refused, with the reason
    for row in ([a, b], [a, text]):
        with pytest.raises(ValueError, match=r"^packing: per-token key 'cross_attention_mask' .*"
                                             r"read each other's images; use packing=false$"):
            PackedCollator(0, 8)([row])
    # text-only samples alone (no key that indexes images) still pack
    assert PackedCollator(0, 8)([[text, _mllama_like(3)]])["input_ids"].shape == (1, 8)
