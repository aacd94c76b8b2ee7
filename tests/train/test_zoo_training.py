"""Training on the zoo of tiny real architectures.

Representatives through real torchrun + DeepSpeed ZeRO-2 on 2 CPU processes (marked
slow): an M-RoPE VLM packed, Gemma3 and mllama with a text-only batch on one rank every
step, and a text-only MoE with LoRA. In-process: mllama's batches, whose per-token
``cross_attention_mask`` is 4-D (the tensors the model receives, and what it computes from them:
each row what its sample computes alone); the blank image a text-only rank runs:
test_callbacks.py. (Every family in-process: tests/models/test_zoo_stages.py; the whole matrix:
bench/zoo_matrix.py.)"""

from __future__ import annotations

import pytest
import torch

from hyport_lib.models.loading import load_model, load_processor
from hyport_lib.npu_attention.hf_integration import register_hyport_attention
from hyport_lib.train import stage
from hyport_lib.train.dataset import Record
from hyport_lib.train.packing import PackedCollator, PaddedCollator
from hyport_lib.train.params import Params
from hyport_lib.train.samples import Encoder
from zoo import mixed_dataset, sample_image

from .test_callbacks import _model_inputs, _trainer


def _train(zoo, tmp_path, name, **params):
    params.setdefault("max_steps", 2)
    params.setdefault("zero_stage", 2)
    params.setdefault("num_cards", 2)
    result = stage.run(stage.plan(Params(model_path=str(zoo[name]), output_dir=str(tmp_path / name),
                                         **params)))
    assert result.status == "ok" and result.exit_code == 0, result.reason
    assert [r.step for r in result.metrics] == list(range(1, params["max_steps"] + 1))
    assert all(r.world_size == 2 for r in result.metrics)
    return result


@pytest.mark.slow
def test_an_mrope_vlm_trains_packed(zoo, tmp_path):
    result = _train(zoo, tmp_path, "qwen2_vl", packing=True)
    assert result.plan.dataset["image_samples"] == 11
    from transformers import AutoModelForImageTextToText

    model, info = AutoModelForImageTextToText.from_pretrained(result.final_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


@pytest.mark.slow
def test_gemma3_trains_with_a_text_only_rank_every_step(zoo, tmp_path):
    data = mixed_dataset(tmp_path / "data")
    result = _train(zoo, tmp_path, "gemma3", packing=False, dataset_path=str(data))
    assert result.plan.dataset["samples"] == 2 and result.plan.dataset["image_samples"] == 1
    assert result.worker.rows == 2


@pytest.mark.slow
def test_mllama_trains_with_a_text_only_rank_every_step(zoo, tmp_path):
    """The rank with the text-only row runs mllama's cross-attention layers on the blank
    image: both ranks reduce the same gradients, where DeepSpeed aborted before."""
    data = mixed_dataset(tmp_path / "data")
    result = _train(zoo, tmp_path, "mllama", packing=False, dataset_path=str(data))
    assert result.plan.dataset["samples"] == 2 and result.plan.dataset["image_samples"] == 1
    assert result.worker.rows == 2


@pytest.mark.slow
def test_a_text_only_moe_trains_with_lora(zoo, tmp_path):
    result = _train(zoo, tmp_path, "qwen3_moe", packing=True, finetuning_type="lora")
    assert result.plan.dataset["model_kind"] == "text-only" and result.plan.dataset["samples"] == 3
    assert any("not applicable" in note for note in result.plan.notes)
    assert 0 < result.worker.trainable_parameters


def _mllama(zoo, tmp_path):
    """The zoo's mllama with live cross-attention, and three samples: a square picture (1
    tile and a padding tile), a wide one (2 tiles) and a text-only record."""
    loaded = load_processor(str(zoo["mllama"]))
    model = load_model(str(zoo["mllama"]), attn_implementation=register_hyport_attention("sdpa")).train()
    with torch.no_grad():
        # transformers initialises the cross-attention gates at 0: tanh(0) = 0 would hide
        # whatever the cross-attention reads, right or wrong.
        gates = [p for n, p in model.named_parameters() if n.endswith(("cross_attn_attn_gate", "cross_attn_mlp_gate"))]
        assert gates
        for gate in gates:
            gate.fill_(0.8)
    paths = {}
    for name, size in (("square", (64, 64)), ("wide", (64, 32))):
        paths[name] = tmp_path / f"{name}.png"
        sample_image(size).save(paths[name])
    records = [
        Record(0, "square", [("user", "Look at this.\n<image>\nWhat is it?"), ("assistant", "A square picture.")],
               [str(paths["square"])]),
        Record(1, "wide", [("user", "<image>\nDescribe it."), ("assistant", "A wide picture with shapes.")],
               [str(paths["wide"])]),
        Record(2, "text", [("user", "How do I open a fridge?"), ("assistant", "Hold the handle and pull.")]),
    ]
    encoder = Encoder(loaded, 1024)
    samples = [encoder.encode(r)[0] for r in records]
    return loaded, model, encoder, samples


#: Real tiles of the square and the wide picture (the zoo's tiles are 32 px, at most 2).
_TILES = (1, 2, 0)


def _expected_cross_attention_mask(samples, encoder, width: int):
    """(rows, width, 1 image, 2 tiles) from the ids alone: mllama's processor lets every
    token from the <|image|> token on see the image's real tiles, nothing before it, and
    nothing of a padding tile, a padding token or a text-only sample."""
    (image_token,) = encoder.image_token_ids
    expected = torch.zeros(len(samples), width, 1, 2, dtype=torch.long)
    for r, (sample, tiles) in enumerate(zip(samples, _TILES)):
        if tiles:
            expected[r, sample.input_ids.index(image_token):len(sample), 0, :tiles] = 1
    return expected


def test_mllama_padded_batch_carries_each_tokens_image_mask(zoo, tmp_path):
    """The 4-D per-token cross_attention_mask is split off per token, padded with the ids
    and on its tile dim: at each token 1 exactly where it may see a tile of its row's image;
    every row has its image rows (the text-only row padding: no pixels, id 0, no tile)."""
    _, _, encoder, samples = _mllama(zoo, tmp_path)
    assert [len(s.token_extras.get("cross_attention_mask", ())) for s in samples] == [len(s) for s in samples[:2]] + [0]
    batch = PaddedCollator(encoder.pad_id)(samples)
    width = max(len(s) for s in samples)
    assert batch["input_ids"].shape == (3, width)
    assert torch.equal(batch["cross_attention_mask"], _expected_cross_attention_mask(samples, encoder, width))
    assert batch["pixel_values"].shape == (3, 1, 2, 3, 32, 32)
    for r, sample in enumerate(samples[:2]):
        assert torch.equal(batch["pixel_values"][r:r + 1], sample.pixel_values)
    assert batch["pixel_values"][2].abs().sum() == 0
    assert batch["aspect_ratio_mask"].tolist() == [[[1, 0]], [[1, 1]], [[0, 0]]]
    assert batch["aspect_ratio_ids"][:2].tolist() == [s.image_extras["aspect_ratio_ids"][0].tolist()
                                                      for s in samples[:2]]
    assert batch["aspect_ratio_ids"][2].tolist() == [0]  # mllama's id of a padding image


def test_mllama_padded_batch_computes_what_each_sample_computes_alone(zoo, tmp_path):
    """Through the Trainer, each row's logits (and so the loss) equal those of its sample
    alone; forward and backward run. The model by itself would let the text-only row read
    its padding image (transformers' cross-attention does not zero rows that may see no
    image): the Trainer gives that row no image states."""
    loaded, model, encoder, samples = _mllama(zoo, tmp_path)
    trainer = _trainer(model, loaded, tmp_path)
    batch = PaddedCollator(encoder.pad_id)(samples)
    model.zero_grad(set_to_none=True)
    loss, out = trainer.compute_loss(model, dict(batch), return_outputs=True)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    weighted, counted = 0.0, 0
    with torch.no_grad():
        for r, sample in enumerate(samples):
            alone_loss, alone = trainer.compute_loss(model, dict(PaddedCollator(encoder.pad_id)([sample])),
                                                     return_outputs=True)
            assert torch.allclose(out.logits[r, :len(sample)], alone.logits[0], atol=1e-5), sample.record_id
            predicted = sum(1 for x in sample.labels[1:] if x != -100)  # the model shifts the labels
            weighted, counted = weighted + float(alone_loss) * predicted, counted + predicted
        assert loss.item() == pytest.approx(weighted / counted, rel=1e-5)
        plain = model(**_model_inputs(batch)).logits
        text_alone = model(**_model_inputs(PaddedCollator(encoder.pad_id)([samples[2]]))).logits
        assert torch.allclose(plain[:2, :len(samples[0])], out.logits[:2, :len(samples[0])], atol=1e-6)
        assert not torch.allclose(plain[2, :len(samples[2])], text_alone[0], atol=1e-3)
        # the reference without any hook: the model skips its cross-attention layers
        assert torch.allclose(out.logits[2, :len(samples[2])], text_alone[0], atol=1e-5)


def test_mllama_packs_one_sample_per_row_and_refuses_to_share_a_row(zoo, tmp_path):
    """Packed rows of one sample each carry the same mask and compute what each sample
    computes alone. Samples packed into one row are refused: a token that may see no
    image (the prompt before one, a text-only sample) attends to every image of its row
    in transformers' mllama, so it would read the other samples' images."""
    loaded, model, encoder, samples = _mllama(zoo, tmp_path)
    width = max(len(s) for s in samples) + 4
    packed = PackedCollator(encoder.pad_id, width)([[s] for s in samples])
    assert torch.equal(packed["cross_attention_mask"], _expected_cross_attention_mask(samples, encoder, width))
    assert packed["pixel_values"].shape[0] == 3 and "attention_mask" not in packed
    trainer = _trainer(model, loaded, tmp_path)
    with torch.no_grad():
        out = trainer.compute_loss(model, dict(packed), return_outputs=True)[1]
        for r, sample in enumerate(samples):
            alone = trainer.compute_loss(model, dict(PaddedCollator(encoder.pad_id)([sample])), return_outputs=True)[1]
            assert torch.allclose(out.logits[r, :len(sample)], alone.logits[0], atol=1e-5), sample.record_id
    for row in (samples[:2], samples[1:]):
        with pytest.raises(ValueError, match=r"^packing: per-token key 'cross_attention_mask' .*each other's images"):
            PackedCollator(encoder.pad_id, sum(len(s) for s in samples))([row])
