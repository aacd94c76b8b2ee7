"""The Trainer pieces hyport adds (hyport_lib/train/callbacks.py), in-process on the zoo: a text-only
batch through ``CountingTrainer`` runs the blank image where a real image's runs, so every rank
gives gradients to the same parameters (LoRA's cross-attention adapters too)."""

from __future__ import annotations

import pytest
import torch

from hyport_lib.models.loading import ProcessorUnavailable, has_torchvision, load_model, load_processor
from hyport_lib.models.prompts import needs_image
from hyport_lib.train.callbacks import CountingTrainer
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.packing import COUNT_KEYS, PaddedCollator
from hyport_lib.train.samples import Encoder
from hyport_lib.train.smoke_data import write_smoke_dataset
from hyport_lib.train.worker import _blank_image_inputs
from zoo import ZOO_NAMES, zoo_entry


VLMS = [n for n in ZOO_NAMES if zoo_entry(n).multimodal]


def _trainer(model, loaded, tmp_path) -> CountingTrainer:
    """The Trainer the worker builds (the blank image of the worker's own making), on the CPU."""
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "trainer"), use_cpu=True, report_to="none")
    return CountingTrainer(model=model, args=args, dummy_image_inputs=_blank_image_inputs(loaded))


def _model_inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k not in COUNT_KEYS}


@pytest.mark.parametrize("name", VLMS)
def test_a_text_only_batch_through_the_trainer_gives_the_image_batchs_gradients(zoo, tmp_path, name):
    """Under DeepSpeed every rank reduces the gradients of the same parameters. A text-only
    batch goes through ``CountingTrainer.compute_loss``, which runs the blank image where a
    real image's runs (for mllama through the forward, cross-attention layers included):
    exactly the parameters an image batch gives a gradient get one, no more, no fewer;
    times zero, the loss and every gradient are those of the text alone, and the image
    path's are 0."""
    try:
        loaded = load_processor(str(zoo[name]))
    except ProcessorUnavailable as exc:
        if has_torchvision() or "torchvision" not in str(exc):
            raise
        pytest.skip(f"{name}'s processor needs torchvision, absent here (so no rank trains it): {exc}")
    records = {r.record_id: r for r in load_dataset(write_smoke_dataset(tmp_path / "data")).records}
    encoder = Encoder(loaded, 1024)
    if needs_image(loaded):
        # PaliGemma: a record without an image never becomes a sample, so no rank ever
        # holds a text-only batch
        assert encoder.encode(records["smoke-text-0"])[1].kind == "not_applicable"
        return
    model = load_model(str(zoo[name])).train()
    trainer = _trainer(model, loaded, tmp_path)

    def gradients(record_id, through_trainer=True):
        model.zero_grad(set_to_none=True)
        batch = PaddedCollator(encoder.pad_id)([encoder.encode(records[record_id])[0]])
        loss = trainer.compute_loss(model, dict(batch)) if through_trainer else model(**_model_inputs(batch)).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    _, image = gradients("smoke-single-0")
    loss, text = gradients("smoke-text-0")
    assert set(text) == set(image)
    alone_loss, alone = gradients("smoke-text-0", through_trainer=False)
    assert set(alone) < set(text)  # without the blank image the image path gets none
    assert torch.allclose(loss, alone_loss, rtol=1e-6, atol=0)
    for n, grad in text.items():
        expected = alone[n] if n in alone else torch.zeros_like(grad)
        assert torch.allclose(grad, expected, rtol=1e-5, atol=1e-7), n


def test_mllama_with_lora_gives_its_cross_attention_adapters_gradients_on_a_text_only_rank(zoo, tmp_path):
    """LoRA wraps the model (a PeftModel, whose forward takes **kwargs): the blank image
    still goes through mllama's forward, so the adapters of its cross-attention layers get
    gradients on a text-only batch as on an image batch."""
    from peft import LoraConfig, get_peft_model

    from hyport_lib.models.module_tree import language_model_path, lora_target_pattern

    loaded = load_processor(str(zoo["mllama"]))
    records = {r.record_id: r for r in load_dataset(write_smoke_dataset(tmp_path / "data")).records}
    encoder = Encoder(loaded, 1024)
    base = load_model(str(zoo["mllama"]))
    pattern = lora_target_pattern(language_model_path(base), ["all"])
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=pattern)).train()
    trainer = _trainer(model, loaded, tmp_path)

    def gradients(record_id):
        model.zero_grad(set_to_none=True)
        batch = PaddedCollator(encoder.pad_id)([encoder.encode(records[record_id])[0]])
        trainer.compute_loss(model, dict(batch)).backward()
        return {n for n, p in model.named_parameters() if p.grad is not None}

    image = gradients("smoke-single-0")
    assert any("cross_attn" in n for n in image)
    assert gradients("smoke-text-0") == image
