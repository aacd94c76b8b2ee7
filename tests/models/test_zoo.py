"""The zoo of tiny checkpoints (tests/zoo.py) is valid for plain transformers.

Only transformers' own API is used here (no hyport code): each folder loads through
the Auto classes, renders its chat template, generates with and without an image,
and trains (finite loss, gradients).
"""

from __future__ import annotations

import json
import math

import pytest

from hyport_lib.models.loading import AbsentVideoProcessor, has_torchvision, without_video
from zoo import ZOO_NAMES, build_zoo, load_processor, sample_image, zoo_entry

PROMPT = "What is this?"
PALIGEMMA_PREFIX = "answer en What is this?"


def _processor(entry, folder):
    """AutoProcessor where it loads; otherwise (the video processor needs torchvision)
    the family's processor from AutoImageProcessor + AutoTokenizer, without video."""
    import transformers
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    try:
        return AutoProcessor.from_pretrained(folder, local_files_only=True)
    except (OSError, ImportError, ValueError, TypeError) as exc:
        assert entry.video_processor, f"{entry.name}: AutoProcessor failed: {exc!r}"
        assert "video" in str(exc).lower(), exc
    processor_class = getattr(transformers, entry.processor_class)
    kwargs = json.loads((folder / "processor_config.json").read_text(encoding="utf-8"))
    kwargs = {k: v for k, v in kwargs.items() if k not in ("processor_class", "image_processor")}
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return without_video(processor_class)(
        image_processor=AutoImageProcessor.from_pretrained(folder, local_files_only=True),
        tokenizer=tokenizer, chat_template=tokenizer.chat_template, **kwargs)


def _inputs_without_the_processor(entry, folder, image):
    """A family whose processor class needs torchvision (Pixtral), on a stack without it:
    ``AutoProcessor`` refuses, as it does for the real checkpoint. The tokenizer (with the
    chat template) and the image processor load on their own, and give the inputs the
    processor would: each image place-holder becomes the picture's patch rows, each row
    of image tokens closed by the break token and the last by the end token.

    Returns:
        ``(tokenizer, inputs with the image, text-only inputs)``.
    """
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    with pytest.raises(ImportError, match=f"{entry.processor_class} requires the Torchvision library"):
        AutoProcessor.from_pretrained(folder, local_files_only=True)
    config = json.loads((folder / "processor_config.json").read_text(encoding="utf-8"))
    assert config["processor_class"] == entry.processor_class
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    image_processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True)

    def render(messages, **kwargs):
        return tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)

    messages = _conversation(image)
    _assert_prefixes(render, messages)
    prompt = render(messages[1:2], add_generation_prompt=True)
    assert PROMPT in prompt and prompt.count(config["image_token"]) == 1
    pixels = image_processor(images=[image], return_tensors="pt")
    height, width = pixels["image_sizes"][0].tolist()
    patch = config["patch_size"]
    rows = [config["image_token"] * (width // patch) + config["image_break_token"]] * (height // patch)
    expanded = "".join(rows)[:-len(config["image_break_token"])] + config["image_end_token"]
    inputs = tokenizer([prompt.replace(config["image_token"], expanded)], add_special_tokens=False,
                       return_tensors="pt")
    text_inputs = tokenizer.apply_chat_template([{"role": "user", "content": "Hello there"}],
                                                add_generation_prompt=True, return_dict=True,
                                                return_tensors="pt")
    return tokenizer, {**inputs, **pixels}, text_inputs


def _conversation(image):
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": PROMPT}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A red circle."}]},
        {"role": "user", "content": "And the square?"},
        {"role": "assistant", "content": "It is blue."},
    ]


def _assert_prefixes(render, messages):
    """Every prefix of the conversation renders as a prefix of the whole."""
    full = render(messages, add_generation_prompt=False)
    for k in range(1, len(messages)):
        part = render(messages[:k], add_generation_prompt=False)
        assert full.startswith(part), (k, part, full)
        if messages[k]["role"] == "assistant":
            prompt = render(messages[:k], add_generation_prompt=True)
            assert full.startswith(prompt), (k, prompt, full)


def _train_step(model, inputs, ignore_ids=()):
    """One step with the ids as labels; ``ignore_ids`` are masked out of the labels
    (Mllama's <|image|> lies outside the output vocabulary)."""
    import torch

    model.train()
    batch = {k: v for k, v in inputs.items() if k != "labels"}
    labels = batch["input_ids"].clone()
    for token_id in ignore_ids:
        labels[labels == token_id] = -100
    out = model(**batch, labels=labels)
    assert torch.isfinite(out.loss), out.loss
    out.loss.backward()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    with_grad = [(n, p.grad) for n, p in params if p.grad is not None]
    assert len(with_grad) >= 0.8 * len(params), [n for n, p in params if p.grad is None]
    assert all(torch.isfinite(g).all() for _, g in with_grad)
    assert any(g.abs().sum() > 0 for _, g in with_grad)
    model.zero_grad(set_to_none=True)
    model.eval()
    return out.loss.item(), with_grad


def _generate(model, inputs):
    import torch

    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert out.shape[0] == inputs["input_ids"].shape[0]
    assert inputs["input_ids"].shape[1] < out.shape[1] <= inputs["input_ids"].shape[1] + 3
    return out


def test_names_and_entries():
    assert len(ZOO_NAMES) == 24 and len(set(ZOO_NAMES)) == 24
    for name in ZOO_NAMES:
        entry = zoo_entry(name)
        assert entry.name == name and entry.architecture and entry.notes
        assert entry.multimodal == (entry.processor_class is not None)
    assert {n for n in ZOO_NAMES if zoo_entry(n).mrope} == {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "hunyuan_vl"}
    assert {n: zoo_entry(n).packing_leak for n in ZOO_NAMES if zoo_entry(n).packing_leak} == {
        "lfm2": "Lfm2ShortConv", "bamba": "BambaMixer", "llama4_text": "Llama4TextAttention"}
    with pytest.raises(KeyError):
        zoo_entry("gpt5")


def test_build_zoo_skips_complete_folders(zoo, tmp_path):
    marker = zoo["qwen3"] / "zoo.json"
    before = marker.stat().st_mtime_ns
    again = build_zoo(zoo["qwen3"].parent, names=["qwen3"])
    assert again == {"qwen3": zoo["qwen3"]}
    assert marker.stat().st_mtime_ns == before
    # An interrupted build (no marker) is rebuilt from scratch.
    partial = tmp_path / "llama"
    partial.mkdir()
    (partial / "leftover.txt").write_text("x")
    built = build_zoo(tmp_path, names=["llama"])
    assert (built["llama"] / "zoo.json").is_file() and not (partial / "leftover.txt").exists()


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_checkpoint_works_with_plain_transformers(zoo, name):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    entry = zoo_entry(name)
    folder = zoo[name]
    marker = json.loads((folder / "zoo.json").read_text(encoding="utf-8"))
    assert {k: marker[k] for k in ("name", "architecture", "multimodal")} == {
        "name": name, "architecture": entry.architecture, "multimodal": entry.multimodal}
    assert 0 < marker["num_parameters"] < 2_000_000 and marker["build_s"] >= 0
    size = sum(p.stat().st_size for p in folder.iterdir())
    assert size < 10 * 2**20, size
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    assert config.architectures == [entry.architecture] and config.model_type == entry.model_type
    assert config.is_encoder_decoder is (entry.auto_model == "AutoModelForSeq2SeqLM")

    if config.is_encoder_decoder:
        _check_encoder_decoder(entry, folder)
        return
    if not entry.multimodal:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
        assert type(model).__name__ == entry.architecture
        assert model.get_input_embeddings().num_embeddings == len(tokenizer)
        messages = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": "A test."},
                    {"role": "user", "content": "Again?"}, {"role": "assistant", "content": "Yes."}]
        _assert_prefixes(lambda m, **kw: tokenizer.apply_chat_template(m, tokenize=False, **kw), messages)
        inputs = tokenizer.apply_chat_template(messages[:1], add_generation_prompt=True, return_dict=True,
                                               return_tensors="pt")
        ids = inputs["input_ids"][0].tolist()
        if tokenizer.bos_token_id is not None and ids[0] == tokenizer.bos_token_id:
            assert ids[1] != tokenizer.bos_token_id  # bos written once
        _generate(model, inputs)
        _train_step(model, inputs)
        return

    model = AutoModelForImageTextToText.from_pretrained(folder, local_files_only=True).eval()
    assert type(model).__name__ == entry.architecture
    image_token_id = getattr(model.config, "image_token_id", None)
    if image_token_id is None:
        image_token_id = model.config.image_token_index
    image = sample_image()

    if entry.torchvision_processor and not has_torchvision():
        tokenizer, inputs, text_inputs = _inputs_without_the_processor(entry, folder, image)
    else:
        processor = _processor(entry, folder)
        assert type(processor).__name__ == entry.processor_class
        assert _no_video_processor(processor)
        tokenizer = processor.tokenizer
        if name == "paligemma":
            assert not processor.chat_template and not tokenizer.chat_template
            inputs = processor(images=[image], text=[PALIGEMMA_PREFIX], return_tensors="pt")
            text_inputs = tokenizer([f"{tokenizer.bos_token}{PALIGEMMA_PREFIX}\n"], return_tensors="pt")
        else:
            messages = _conversation(image)
            _assert_prefixes(lambda m, **kw: processor.apply_chat_template(m, tokenize=False, **kw), messages)
            question = messages[1:2]
            prompt = processor.apply_chat_template(question, add_generation_prompt=True, tokenize=False)
            assert PROMPT in prompt
            inputs = processor.apply_chat_template(question, add_generation_prompt=True, tokenize=True,
                                                   return_dict=True, return_tensors="pt")
            # The same ids from the rendered text through the processor's __call__ (the
            # template already wrote bos where the family has one).
            again = processor(images=[image], text=[prompt], return_tensors="pt", add_special_tokens=False)
            assert again["input_ids"].tolist() == inputs["input_ids"].tolist()
            text_only = [{"role": "user", "content": "Hello there"}]
            text_inputs = processor.apply_chat_template(text_only, add_generation_prompt=True, tokenize=True,
                                                        return_dict=True, return_tensors="pt")
    assert image_token_id not in text_inputs["input_ids"][0].tolist()

    n_image_tokens = int((inputs["input_ids"] == image_token_id).sum())
    if name == "mllama":
        # Cross-attention: one <|image|> marks the picture, whose states stay out of the
        # sequence; it is the last id, one past the language model's output rows, and the
        # text embeddings have 8 rows more (Llama-3.2-Vision: 128264 for 128257 tokens).
        vocab = model.config.text_config.vocab_size
        assert image_token_id == vocab == len(tokenizer) - 1
        assert model.get_input_embeddings().num_embeddings == vocab + 8
        assert n_image_tokens == 1
        batch, length = inputs["input_ids"].shape
        tiles = model.config.vision_config.max_num_tiles
        assert tuple(inputs["cross_attention_mask"].shape) == (batch, length, 1, tiles)
        assert inputs["aspect_ratio_mask"].tolist() == [[[1] + [0] * (tiles - 1)]]  # one real tile
    else:
        assert model.get_input_embeddings().num_embeddings == len(tokenizer)
        assert 4 <= n_image_tokens <= 64, n_image_tokens
    assert inputs["input_ids"].shape[1] < 128
    assert "pixel_values" in inputs
    _generate(model, inputs)
    _generate(model, text_inputs)
    loss, grads = _train_step(model, inputs, ignore_ids=[image_token_id] if name == "mllama" else [])
    assert math.isfinite(loss)
    vision = [n for n, _ in grads if any(k in n for k in ("visual", "vision", "multi_modal_projector",
                                                           "connector", "mlp1"))]
    assert vision, "no gradient reached the vision side"


def _check_encoder_decoder(entry, folder):
    """BART as the hub ships it: no chat template; every text is <s> ... </s>; generation
    starts from decoder_start_token_id; labels train encoder and decoder both."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert not entry.chat_template and not tokenizer.chat_template
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, local_files_only=True).eval()
    assert type(model).__name__ == entry.architecture
    inputs = tokenizer([PROMPT], return_tensors="pt")
    ids = inputs["input_ids"][0].tolist()
    assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
    assert model.generation_config.decoder_start_token_id == model.config.decoder_start_token_id
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert out[0, 0] == model.config.decoder_start_token_id and 1 < out.shape[1] <= 4
    _, grads = _train_step(model, inputs)
    assert any(n.startswith("model.encoder.") for n, _ in grads)
    assert any(n.startswith("model.decoder.") for n, _ in grads)


def test_load_processor_falls_back_without_video(zoo):
    from transformers import AutoProcessor

    assert ZOO_NAMES
    for name in ZOO_NAMES:
        entry = zoo_entry(name)
        if entry.torchvision_processor and not has_torchvision():
            # No processor class to fall back to (Pixtral): the import error, as for the real checkpoint.
            with pytest.raises(ImportError, match="requires the Torchvision library"):
                load_processor(zoo[name])
            continue
        processor = load_processor(zoo[name])
        if not entry.multimodal:
            assert bool(processor.chat_template) is entry.chat_template and processor.eos_token
            continue
        assert type(processor).__name__ == entry.processor_class
        assert _no_video_processor(processor)
        if entry.video_processor:  # AutoProcessor wants a torchvision video processor
            try:
                AutoProcessor.from_pretrained(zoo[name], local_files_only=True)
            except OSError as exc:
                assert "video processor" in str(exc)


def _no_video_processor(processor) -> bool:
    """No video processor, or hyport's stand-in that answers its settings from the
    checkpoint's config (hyport_lib.models.loading.AbsentVideoProcessor)."""
    video = getattr(processor, "video_processor", None)
    return video is None or isinstance(video, AbsentVideoProcessor)
