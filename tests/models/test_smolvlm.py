"""SmolVLM whose processor has neither a video processor nor ``video_sampling`` (issue 40,
item 7), through stages 02, 03 and 04, in-process.

transformers' ``SmolVLMProcessor.apply_chat_template`` reads its video processor's
``num_frames`` and ``fps`` for every conversation (the arguments of ``setdefault`` are
evaluated before it looks); such a checkpoint has neither, so hyport renders a conversation
without video with them unset and returns the text only where it does not depend on them.
Images must then give exactly what the processor gives when the settings are present.

``SmolVLMProcessor`` also needs the ``num2words`` package, which the pinned stack lacks
(nothing in ``constraints/cpu.txt`` or the offline wheels provides it): hyport refuses in one
line naming it. The path with the package present runs on a double of it (see
:func:`num2words_double`).

The checkpoint is a focused fixture, not a zoo entry: without num2words no processor of this
class can be built here, so the zoo-wide tests (each family through plain transformers) could
only assert its refusal.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
import torch

from hyport_lib.inference import stage as inference_stage
from hyport_lib.inference.params import Params as InferenceParams
from hyport_lib.models.generation import run_inference
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.loading import AbsentVideoProcessor, ProcessorUnavailable, load_processor, without_video
from hyport_lib.models.prompts import Prompt, encode_prompts, render_messages, sample_image
from hyport_lib.proof.model_check import compare_model
from hyport_lib.train import stage as train_stage
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.params import Params as TrainParams
from hyport_lib.train.samples import Encoder
from hyport_lib.train.smoke_data import write_smoke_dataset
from hyport_lib.utils.printable import USAGE_ERRORS
from zoo import _TEXT, _ProcessorFiles, _ids, _special_ids, idefics3_tokenizer

IMAGE_SIZE, PATCH, SCALE = 64, 8, 2
#: <image> tokens per picture: (64 / 8)^2 patches, pixel-shuffled by 2 in each direction.
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH) ** 2 // SCALE ** 2
#: What SmolVLM2 checkpoints ship (their video processor reads num_frames and fps from it).
VIDEO_SAMPLING = {"fps": 1, "max_frames": 64, "video_size": {"longest_edge": IMAGE_SIZE}}


def build_smolvlm(folder: Path) -> Path:
    """A tiny SmolVLMForConditionalGeneration (model_type ``smolvlm``: SigLIP-like tower,
    pixel-shuffle connector, Llama text model) with the processor files a SmolVLM checkpoint
    ships, written by hand (no SmolVLMProcessor can be built without num2words):
    ``processor_config.json`` (image_seq_len), ``preprocessor_config.json`` for
    SmolVLMImageProcessor without ``video_sampling``, the tokenizer and SmolVLM's template."""
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMImageProcessorPil

    tokenizer = idefics3_tokenizer()
    image_processor = SmolVLMImageProcessorPil(do_image_splitting=False, size={"longest_edge": IMAGE_SIZE},
                                               max_image_size={"longest_edge": IMAGE_SIZE})
    text = dict(_TEXT, model_type="llama", **_special_ids(tokenizer), tie_word_embeddings=False)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  image_size=IMAGE_SIZE, patch_size=PATCH)
    config = SmolVLMConfig(text_config=text, vision_config=vision, scale_factor=SCALE,
                           image_token_id=_ids(tokenizer, "<image>")[0], tie_word_embeddings=False,
                           pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = SmolVLMForConditionalGeneration(config).eval()
    model.generation_config.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                   pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(folder)
    _ProcessorFiles(tokenizer, image_processor, {"processor_class": "SmolVLMProcessor",
                                                 "image_seq_len": IMAGE_SEQ_LEN}).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def smolvlm(tmp_path_factory) -> Path:
    folder = build_smolvlm(tmp_path_factory.mktemp("smolvlm"))
    preprocessor = json.loads((folder / "preprocessor_config.json").read_text(encoding="utf-8"))
    assert preprocessor["image_processor_type"] == "SmolVLMImageProcessor" and "video_sampling" not in preprocessor
    assert not (folder / "video_preprocessor_config.json").exists()
    return folder


@pytest.fixture(scope="module")
def with_settings(smolvlm, tmp_path_factory) -> Path:
    """The same checkpoint with the ``video_sampling`` block its processor's settings come
    from: what the processor renders when they are present."""
    folder = tmp_path_factory.mktemp("smolvlm-settings") / "ckpt"
    shutil.copytree(smolvlm, folder)
    path = folder / "preprocessor_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), "video_sampling": VIDEO_SAMPLING}),
                    encoding="utf-8")
    return folder


@pytest.fixture
def num2words_double(monkeypatch):
    """transformers binds ``num2words`` in ``processing_smolvlm`` at import (None where the
    package is missing, and ``SmolVLMProcessor.__init__`` refuses on None). The package is
    called in one place only, to spell a video's frame count (``replace_video_token``). The
    double stands where the package would be and fails the test if it is ever called: no
    image, text or training path needs it."""
    from transformers.models.smolvlm import processing_smolvlm

    def num2words(number, *args, **kwargs):
        raise AssertionError(f"num2words({number!r}) called: only a video's frame count is spelled")

    monkeypatch.setattr(processing_smolvlm, "num2words", num2words)


@pytest.fixture
def without_num2words(monkeypatch):
    """transformers' own state without the package (whether or not this stack has it)."""
    from transformers.models.smolvlm import processing_smolvlm

    monkeypatch.setattr(processing_smolvlm, "num2words", None)


def _one_line(exc: BaseException, *words: str) -> str:
    message = str(exc)
    assert "\n" not in message and isinstance(exc, USAGE_ERRORS), message  # exit 2 from the CLI
    for word in words:
        assert word in message, (word, message)
    return message


CONVERSATIONS = [
    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}],
    [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}],
    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]},
     {"role": "assistant", "content": [{"type": "text", "text": "A red circle."}]},
     {"role": "user", "content": [{"type": "text", "text": "And the square?"}]}],
]


# ------------------------------------------------------------------ without num2words
def test_without_num2words_every_stage_refuses_in_one_line_naming_it(smolvlm, tmp_path, without_num2words):
    with pytest.raises(ProcessorUnavailable) as caught:
        load_processor(str(smolvlm))
    message = _one_line(caught.value, str(smolvlm), "SmolVLMProcessor", "num2words", "pip install num2words")
    assert "torchvision" not in message  # was: "needs torchvision ... install the torchvision built for ..."
    with pytest.raises(ProcessorUnavailable, match="num2words"):  # 02: the model check
        compare_model(str(smolvlm), max_new_tokens=2)
    with pytest.raises(ProcessorUnavailable, match="num2words"):  # 03: the grid's plan, before any worker
        inference_stage.plan(InferenceParams(model_path=str(smolvlm), num_cards=1))
    with pytest.raises(ProcessorUnavailable, match="num2words"):  # 04: the launch's plan
        train_stage.plan(TrainParams(model_path=str(smolvlm), output_dir=str(tmp_path / "out"), num_cards=1,
                                     attn_implementation="eager"))
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ with num2words (its double)
def test_images_render_and_tokenise_as_with_the_video_settings_present(smolvlm, with_settings, num2words_double):
    loaded, reference = load_processor(str(smolvlm)), load_processor(str(with_settings))
    assert type(loaded.processor).__name__ == "SmolVLMProcessor"
    assert isinstance(loaded.processor.video_processor, AbsentVideoProcessor)
    assert loaded.unavailable and "videos are not" in loaded.unavailable[0]
    # The reference reads real settings: the read this checkpoint cannot answer.
    assert (reference.processor.video_processor.num_frames, reference.processor.video_processor.fps) == (64, 1)
    for messages in CONVERSATIONS:
        for generation_prompt in (False, True):
            text = render_messages(loaded, messages, generation_prompt=generation_prompt)
            assert text == render_messages(reference, messages, generation_prompt=generation_prompt)
            # ... which is the template's own text: the settings never reached it.
            assert text == reference.processor.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation_prompt)
    prompts = [Prompt("What is this?", [sample_image()]), Prompt("Hello there")]
    ours, theirs = encode_prompts(loaded, prompts), encode_prompts(reference, prompts)
    assert sorted(ours) == sorted(theirs) and "pixel_values" in ours
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key
    image_id = loaded.processor.image_token_id
    assert (ours["input_ids"] == image_id).sum(dim=1).tolist() == [IMAGE_SEQ_LEN, 0]


def test_a_video_is_refused_in_one_line(smolvlm, num2words_double):
    loaded = load_processor(str(smolvlm))
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]}]
    with pytest.raises(ProcessorUnavailable) as caught:
        render_messages(loaded, messages, generation_prompt=True)
    _one_line(caught.value, "SmolVLMProcessor's chat template", "video_processor.num_frames")


def test_a_video_processor_left_none_gets_the_stand_in(smolvlm, with_settings, num2words_double, monkeypatch,
                                                       tmp_path):
    """The issue's report: a SmolVLMProcessor whose ``video_processor`` is None crashed with
    AttributeError (exit 3). transformers 5 builds none here (its type check refuses None and,
    without torchvision, the video processor's class is absent), so AutoProcessor is replaced
    by one that returns the real class loaded from the folder with ``video_processor = None``."""
    import transformers

    def auto_processor(path, **kwargs):
        loaded = without_video(transformers.SmolVLMProcessor).from_pretrained(path, **kwargs)
        processor = transformers.SmolVLMProcessor.__new__(transformers.SmolVLMProcessor)
        processor.__dict__.update(vars(loaded))
        processor.video_processor = None
        return processor

    with monkeypatch.context() as patch:
        patch.setattr(transformers.AutoProcessor, "from_pretrained", auto_processor)
        loaded = load_processor(str(smolvlm))
    assert isinstance(loaded.processor, transformers.SmolVLMProcessor)
    assert type(loaded.processor).__name__ == "SmolVLMProcessor"  # saved folders name the real class
    assert isinstance(loaded.processor.video_processor, AbsentVideoProcessor)
    assert "not in this checkpoint" in repr(loaded.processor.video_processor)
    assert loaded.unavailable == ["video processor: not in this checkpoint"]
    reference = load_processor(str(with_settings))
    assert render_messages(loaded, CONVERSATIONS[0], generation_prompt=True) == \
        render_messages(reference, CONVERSATIONS[0], generation_prompt=True)
    # The worker's final save and the Trainer's checkpoints save the processor: without the
    # video part, as the folder had it.
    loaded.processor.save_pretrained(tmp_path / "saved")
    assert (tmp_path / "saved" / "tokenizer_config.json").is_file()
    assert not (tmp_path / "saved" / "video_preprocessor_config.json").exists()


def _received(monkeypatch) -> dict[str, list]:
    """What the model receives: each forward call's ``input_ids``, and the pixels of each
    image encoding (generate encodes the pictures before its first forward and hands that
    forward their features, not the pixels)."""
    from transformers import SmolVLMForConditionalGeneration, SmolVLMModel

    received: dict[str, list] = {"input_ids": [], "pixel_values": []}
    forward, encode = SmolVLMForConditionalGeneration.forward, SmolVLMModel.get_image_features

    @functools.wraps(forward)  # generate reads the model's keywords from its signature
    def recording_forward(self, *args, **kwargs):
        received["input_ids"].append(kwargs.get("input_ids"))
        return forward(self, *args, **kwargs)

    @functools.wraps(encode)
    def recording_encode(self, pixel_values, *args, **kwargs):
        received["pixel_values"].append(pixel_values)
        return encode(self, pixel_values, *args, **kwargs)

    monkeypatch.setattr(SmolVLMForConditionalGeneration, "forward", recording_forward)
    monkeypatch.setattr(SmolVLMModel, "get_image_features", recording_encode)
    return received


def _assert_first_inputs(received: dict, expected: dict) -> None:
    assert received["input_ids"] and received["pixel_values"], {k: len(v) for k, v in received.items()}
    assert torch.equal(received["input_ids"][0], expected["input_ids"])
    assert torch.equal(received["pixel_values"][0], expected["pixel_values"])


def test_stage_02_model_check_passes_on_the_images_prompt(smolvlm, with_settings, num2words_double, monkeypatch):
    received = _received(monkeypatch)
    result = compare_model(str(smolvlm), max_new_tokens=2)
    assert result.verdict == "PASS", result.detail
    assert result.model_kind == "image-text-to-text" and result.batch == "image + text beside text only"
    assert result.swapped_calls and result.swapped_calls > 0
    # The first forward is the left-padded batch: the image prompt as the processor with the
    # settings present encodes it, its picture included.
    expected = encode_prompts(load_processor(str(with_settings)),
                              [Prompt("How do I open a fridge?", [sample_image()]), Prompt("Hi")])
    _assert_first_inputs(received, expected)


def test_stage_03_plan_and_inference_run_the_image_prompt(smolvlm, with_settings, num2words_double, monkeypatch):
    plan = inference_stage.plan(InferenceParams(model_path=str(smolvlm), num_cards=1, device="cpu"))
    assert plan is not None
    received = _received(monkeypatch)
    outcome = run_inference(InferenceConfig(model_path=str(smolvlm), max_new_tokens=2, warmup_runs=0))
    assert outcome.new_tokens == 2 and outcome.not_applicable == [] and len(outcome.batch_outputs) == 2
    expected = encode_prompts(load_processor(str(with_settings)),
                              [Prompt(InferenceConfig().single_prompt, [sample_image()])])
    assert outcome.prompt_tokens == expected["input_ids"].shape[1]
    _assert_first_inputs(received, expected)


def test_stage_04_plan_encodes_the_images_as_with_the_settings_present(smolvlm, with_settings, tmp_path,
                                                                       num2words_double):
    plan = train_stage.plan(TrainParams(model_path=str(smolvlm), output_dir=str(tmp_path / "out"),
                                        num_cards=1, device="cpu", attn_implementation="eager"))
    summary = plan.dataset
    assert summary["samples"] == summary["total"] and summary["skipped"] == 0 and summary["image_samples"] > 0
    assert any("videos are not" in part for part in summary["processor_unavailable"])
    # The samples the workers train, record by record, equal the encoding with the settings present.
    records = load_dataset(write_smoke_dataset(tmp_path / "smoke")).records
    ours = Encoder(load_processor(str(smolvlm)), 1024)
    theirs = Encoder(load_processor(str(with_settings)), 1024)
    images = 0
    for record in records:
        mine, problem = ours.encode(record)
        reference, _ = theirs.encode(record)
        assert problem is None and mine is not None, (record.record_id, problem)
        assert (mine.input_ids, mine.labels) == (reference.input_ids, reference.labels), record.record_id
        if reference.pixel_values is not None:
            images += 1
            assert torch.equal(mine.pixel_values, reference.pixel_values), record.record_id
    assert images == summary["image_samples"]
