"""Loading processors (models/loading.py): fallbacks that refuse, never crash (issue 28, item 6).

* :func:`without_video` builds a class for every processor transformers exports, and a
  processor so built loads, saves and reloads whatever the place of its video argument;
* without torchvision, a processor that cannot work without it (its class, or its only
  image processor, needs it) is refused in one line naming the folder and what to
  install; one that can loses its video part only, and says so;
* a processor that reads its video processor's settings (SmolVLM's ``num_frames``)
  renders with the checkpoint's values; where it has none, a conversation without video
  whose text does not depend on them renders them unset, and any other refuses in one line.

The fixtures are built here (tokenizers trained offline, configs from transformers'
own classes); nothing is downloaded.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import transformers
from transformers import CONFIG_MAPPING, AutoTokenizer, PreTrainedTokenizerFast, ProcessorMixin

from hyport_lib.utils.printable import USAGE_ERRORS
from hyport_lib.models.families import IMAGE_TEXT_TO_TEXT, ModelTraits
from hyport_lib.models.loading import (AbsentVideoProcessor, LoadedProcessor, ProcessorUnavailable,
                                       VideoSettingUnavailable, _attribute_names, has_torchvision,
                                       load_processor, without_video)
from hyport_lib.models.prompts import render_messages
from hyport_lib.models.tiny import train_byte_bpe

MAJOR = int(transformers.__version__.split(".")[0])
CORPUS = ["Describe the image. A red circle and a blue square.", "What is this? It is a picture.",
          "The frames of a video show a cat walking across a garden."] * 4
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
            "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
            "{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>"
            "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
            "<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# What a SmolVLM-style template does with the value its processor reads from the video
# processor: here, say it, so that the rendering shows which value was used.
FRAMES_TEMPLATE = "(videos: at most {{ num_frames }} frames)" + TEMPLATE


def _tokenizer(*special: str, template: str = TEMPLATE, processor_class=None) -> PreTrainedTokenizerFast:
    # The family's tokens are special tokens of the trained backend (one id each); they are
    # not named to the wrapper, whose keyword for them differs between 4.x and 5.x.
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *special]
    tokenizer = _tokenizer_class(processor_class)(
        tokenizer_object=train_byte_bpe(CORPUS, tokens, 400), bos_token="<|im_start|>",
        eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = template
    return tokenizer


def _tokenizer_class(processor_class) -> type:
    """The tokenizer class a processor accepts: transformers 4.x checks the family's own
    (``tokenizer_class``, slow and fast), 5.x any tokenizer."""
    names = getattr(processor_class, "tokenizer_class", None)
    name = names[-1] if isinstance(names, tuple) else names
    cls = getattr(transformers, str(name), None) if name and name != "AutoTokenizer" else None
    return cls if isinstance(cls, type) else PreTrainedTokenizerFast


def _image_processor(model_type: str):
    """The model type's image processor that needs no torchvision (5.x: the ``pil`` one,
    4.x: the slow one), or None where it has none on this stack."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type)
    name = names.get("pil") if isinstance(names, dict) else (names[0] if isinstance(names, tuple) else names)
    cls = getattr(transformers, str(name), None) if name else None
    return cls() if isinstance(cls, type) and hasattr(cls, "preprocess") else None


def _write_config(folder: Path, data: dict) -> None:
    (folder / "config.json").write_text(json.dumps(data), encoding="utf-8")


def _one_line_refusal(exc: BaseException, *words: str) -> str:
    message = str(exc)
    assert "\n" not in message, message
    assert isinstance(exc, USAGE_ERRORS), f"{type(exc).__name__} would not exit 2 through the CLI"
    for word in words:
        assert word in message, (word, message)
    return message


# ------------------------------------------------------------------ (a) every processor class
def _exported_processor_classes() -> tuple[list[type], list[str]]:
    """Every ``*Processor`` transformers exports that is a ProcessorMixin, and the names
    that do not import here (a missing optional package, e.g. num2words on 4.x)."""
    classes, unimportable = [], []
    for name in sorted(n for n in dir(transformers) if n.endswith("Processor")):
        try:
            cls = getattr(transformers, name)
        except ImportError:  # the name exists, its module needs a package this stack lacks
            unimportable.append(name)
            continue
        if isinstance(cls, type) and issubclass(cls, ProcessorMixin):
            classes.append(cls)
    return classes, unimportable


def test_without_video_builds_a_class_for_every_exported_processor():
    classes, unimportable = _exported_processor_classes()
    assert len(classes) > 50, (len(classes), unimportable)
    subclassed = 0
    for cls in classes:
        # A class whose __init__ is (*args, **kwargs), as PeVideoProcessor's and Pixtral's
        # placeholder's, made the old code generate `def __init__(self, , **kwargs)`.
        built = without_video(cls)
        assert not [a for a in _attribute_names(built) if "video" in a], cls.__name__
        if not [a for a in _attribute_names(cls) if "video" in a]:
            assert built is cls, cls.__name__  # nothing to drop: the class itself
            continue
        subclassed += 1
        assert built.__name__ == cls.__name__ and issubclass(built, cls)
        # The real __init__ (no generated code): its signature and its parameter names,
        # which from_pretrained reads from the code object, are the class's own. A class
        # that keeps ProcessorMixin's gets the (*args, **kwargs) of the base that drops the
        # video argument.
        assert inspect.signature(built.__init__) == inspect.signature(cls.__init__)
        if cls.__init__ is not ProcessorMixin.__init__:
            assert built.__init__ is cls.__init__
        assert without_video(cls) is built
    assert subclassed >= 5, subclassed  # Qwen-VL family, LLaVA-OneVision, InternVL ... at least


@pytest.mark.parametrize("class_name, model_type", [
    ("Qwen2VLProcessor", "qwen2_vl"),           # video_processor after the tokenizer
    ("VideoLlavaProcessor", "video_llava"),     # between the image processor and the tokenizer
    ("LlavaNextVideoProcessor", "llava_next"),  # first
])
def test_without_video_round_trips_whatever_the_video_argument_position(tmp_path, class_name, model_type):
    cls = getattr(transformers, class_name)
    image_processor = _image_processor(model_type)
    if image_processor is None:
        pytest.skip(f"{model_type} has no image processor without torchvision on transformers "
                    f"{transformers.__version__}")
    built = without_video(cls)
    processor = built(image_processor=image_processor, chat_template=TEMPLATE,
                      tokenizer=_tokenizer("<image>", "<video>", processor_class=cls))
    assert type(processor.image_processor) is type(image_processor)
    assert isinstance(processor.video_processor, AbsentVideoProcessor)
    processor.save_pretrained(tmp_path)
    # transformers 5 writes processor_config.json (the sub-processors nested), 4.x only when
    # the processor has settings of its own; the video processor is in neither.
    config_file = tmp_path / "processor_config.json"
    saved = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    assert saved.get("processor_class", class_name) == class_name and "video_processor" not in saved
    assert not (tmp_path / "video_preprocessor_config.json").exists()
    again = built.from_pretrained(tmp_path, local_files_only=True)
    assert type(again) is built
    assert type(again.image_processor) is type(image_processor)
    video_id = processor.tokenizer.convert_tokens_to_ids("<video>")
    assert again.tokenizer.convert_tokens_to_ids("<video>") == video_id
    # No video processor config was saved: the stand-in knows no setting, and says so
    # as a missing attribute (hasattr, getattr with a default keep working).
    assert not hasattr(again.video_processor, "num_frames")
    with pytest.raises(ProcessorUnavailable, match="^videos cannot be processed"):
        again.video_processor([[[0]]])


# ------------------------------------------------------------------ (b) torchvision refusals
def _pixtral_folder(folder: Path) -> Path:
    """The layout of mistral-community/pixtral-12b: LLaVA with a Pixtral vision tower,
    ``PixtralProcessor`` named in processor_config.json."""
    from transformers import LlavaConfig

    tokenizer = _tokenizer("[IMG]", "[IMG_BREAK]", "[IMG_END]")
    tokenizer.save_pretrained(folder)
    config = LlavaConfig(vision_config={"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 64,
                                        "num_hidden_layers": 1, "num_attention_heads": 2},
                         text_config={"model_type": "mistral", "hidden_size": 32, "intermediate_size": 64,
                                      "num_hidden_layers": 1, "num_attention_heads": 2,
                                      "num_key_value_heads": 1},
                         image_token_index=tokenizer.convert_tokens_to_ids("[IMG]"))
    _write_config(folder, config.to_dict())
    (folder / "processor_config.json").write_text(json.dumps({
        "processor_class": "PixtralProcessor", "patch_size": 16, "spatial_merge_size": 1,
        "image_token": "[IMG]", "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]"}))
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "PixtralImageProcessor", "processor_class": "PixtralProcessor",
        "patch_size": {"height": 16, "width": 16}, "size": {"longest_edge": 64}}))
    return folder


def test_pixtral_processor_is_refused_in_one_line_or_loads(tmp_path):
    folder = _pixtral_folder(tmp_path)
    cls = transformers.PixtralProcessor
    if isinstance(cls, type) and issubclass(cls, ProcessorMixin):
        # This stack builds it (transformers 4.x, or torchvision present): it loads whole.
        loaded = load_processor(str(folder))
        assert type(loaded.processor).__name__ == "PixtralProcessor" and loaded.unavailable == []
        return
    with pytest.raises(ProcessorUnavailable) as caught:
        load_processor(str(folder))
    message = _one_line_refusal(caught.value, str(folder), "PixtralProcessor", "torchvision", "install")
    assert "tokenizer" not in message  # not blamed on the tokenizer files


def test_a_processor_placeholder_is_refused_by_without_video():
    placeholder = transformers.PixtralProcessor
    if isinstance(placeholder, type) and issubclass(placeholder, ProcessorMixin):
        pytest.skip("PixtralProcessor is built on this stack")
    with pytest.raises(ProcessorUnavailable) as caught:
        without_video(placeholder)
    _one_line_refusal(caught.value, "PixtralProcessor", "torchvision")


@pytest.mark.skipif(has_torchvision(), reason="torchvision imports: nothing is refused")
def test_an_image_processor_that_needs_torchvision_is_refused_in_one_line(tmp_path):
    # Llama-4's only image processor is torchvision-backed (5.x), and its processor has no
    # video part to drop: without torchvision it cannot work at all.
    if _image_processor("llama4") is not None:
        pytest.skip(f"llama4 has an image processor without torchvision on {transformers.__version__}")
    from transformers import Llama4Processor

    tokens = ("<|image|>", "<|image_start|>", "<|image_end|>", "<|patch|>")
    _tokenizer(*tokens, processor_class=Llama4Processor).save_pretrained(tmp_path)
    _write_config(tmp_path, CONFIG_MAPPING["llama4"]().to_dict())
    (tmp_path / "processor_config.json").write_text(json.dumps({"processor_class": "Llama4Processor"}))
    # The name Llama-4 checkpoints give it: 5.x calls the torchvision class plainly, 4.x "Fast".
    name = "Llama4ImageProcessor" if MAJOR >= 5 else "Llama4ImageProcessorFast"
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": name, "processor_class": "Llama4Processor"}))
    with pytest.raises(ProcessorUnavailable) as caught:
        load_processor(str(tmp_path))
    _one_line_refusal(caught.value, str(tmp_path), "Llama4Processor", "torchvision", "install")


@pytest.mark.skipif(has_torchvision(), reason="torchvision imports: the processor loads whole")
def test_a_processor_that_works_without_video_loads_and_says_so(tmp_path):
    from transformers import Qwen2VLConfig, Qwen2VLProcessor

    image_processor = _image_processor("qwen2_vl")
    tokens = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
    without_video(Qwen2VLProcessor)(image_processor=image_processor, chat_template=TEMPLATE,
                                    tokenizer=_tokenizer(*tokens, processor_class=Qwen2VLProcessor),
                                    ).save_pretrained(tmp_path)
    _write_config(tmp_path, Qwen2VLConfig().to_dict())
    loaded = load_processor(str(tmp_path))
    assert type(loaded.processor).__name__ == "Qwen2VLProcessor"
    assert isinstance(loaded.processor.video_processor, AbsentVideoProcessor)
    assert len(loaded.unavailable) == 1 and "torchvision" in loaded.unavailable[0], loaded.unavailable
    assert loaded.prompt_format == "chat"


# ------------------------------------------------------------------ (c) video settings
class FramesProcessor(ProcessorMixin):
    """A processor that reads its video processor's ``num_frames`` for every conversation
    and hands it to its template, as SmolVLM's ``apply_chat_template`` does (transformers
    passes a template only the tokenizer's special tokens and the call's keywords, so a
    processor setting reaches a template this way)."""

    if not hasattr(ProcessorMixin, "get_attributes"):  # transformers 4.x lists them by hand
        attributes = ["image_processor", "tokenizer", "video_processor"]
        image_processor_class = "AutoImageProcessor"
        tokenizer_class = "AutoTokenizer"
        video_processor_class = "AutoVideoProcessor"

    def __init__(self, image_processor=None, tokenizer=None, video_processor=None, chat_template=None,
                 **kwargs):
        super().__init__(image_processor, tokenizer, video_processor, chat_template=chat_template)

    def apply_chat_template(self, conversation, chat_template=None, **kwargs):
        kwargs.setdefault("num_frames", self.video_processor.num_frames)
        return super().apply_chat_template(conversation, chat_template, **kwargs)


MESSAGES = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}]


def _frames_folder(folder: Path, video_config, template: str = FRAMES_TEMPLATE) -> Path:
    built = without_video(FramesProcessor)
    built(image_processor=_image_processor("qwen2_vl"), tokenizer=_tokenizer("<image>"),
          chat_template=template).save_pretrained(folder)
    if video_config == "nested":  # transformers 5 saves sub-processor configs here
        config_file = folder / "processor_config.json"  # 4.x writes none for this processor
        data = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        data["video_processor"] = {"num_frames": 4, "fps": 2}
        (folder / "processor_config.json").write_text(json.dumps(data))
        (folder / "video_preprocessor_config.json").write_text(json.dumps({"num_frames": 99}))
    elif video_config == "file":
        (folder / "video_preprocessor_config.json").write_text(json.dumps({"num_frames": 8, "fps": 1}))
    return folder


def _loaded(folder: Path) -> LoadedProcessor:
    processor = without_video(FramesProcessor).from_pretrained(folder, local_files_only=True)
    return LoadedProcessor(processor, ModelTraits("frames", True, IMAGE_TEXT_TO_TEXT))


# Where both are there, transformers 5 reads the nested entry first, 4.x the file: the
# stand-in follows the transformers at hand.
@pytest.mark.parametrize("video_config, frames", [
    ("file", 8), ("nested", 4 if MAJOR >= 5 else 99)])
def test_a_template_reading_the_video_settings_renders_with_the_checkpoints_values(tmp_path, video_config,
                                                                                    frames):
    loaded = _loaded(_frames_folder(tmp_path, video_config))
    text = render_messages(loaded, MESSAGES, generation_prompt=True)
    # The same template rendered by the tokenizer with the value given by hand: the stand-in
    # changed nothing but the missing object (nested config first, as transformers reads it).
    tokenizer = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    expected = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True,
                                             chat_template=FRAMES_TEMPLATE, num_frames=frames)
    assert text == expected and f"at most {frames} frames" in text, text


def test_a_template_reading_a_video_setting_the_checkpoint_lacks_is_refused_in_one_line(tmp_path):
    loaded = _loaded(_frames_folder(tmp_path, None))
    # Still an AttributeError: getattr with a default and hasattr keep working.
    assert getattr(loaded.processor.video_processor, "num_frames", "absent") == "absent"
    with pytest.raises(VideoSettingUnavailable):
        loaded.processor.video_processor.num_frames
    with pytest.raises(ProcessorUnavailable) as caught:
        render_messages(loaded, MESSAGES, generation_prompt=True)
    _one_line_refusal(caught.value, "FramesProcessor's chat template", "video_processor.num_frames",
                      "depends on num_frames")


@pytest.mark.parametrize("reads, refused", [
    ("{% if num_frames is defined %}{% endif %}", None),  # read, but the text does not change
    ("{{ num_frames + 1 }}", "rendered without it"),  # cannot do without it
])
def test_a_video_setting_the_text_does_not_depend_on_is_rendered_unset(tmp_path, reads, refused):
    """A conversation without video whose processor reads a setting the checkpoint lacks
    (SmolVLM's num_frames and fps): the text when it does not depend on the value, else one line."""
    loaded = _loaded(_frames_folder(tmp_path, None, template=reads + TEMPLATE))
    if refused:
        with pytest.raises(ProcessorUnavailable) as caught:
            render_messages(loaded, MESSAGES, generation_prompt=True)
        _one_line_refusal(caught.value, "video_processor.num_frames", refused)
        return
    tokenizer = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    expected = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True,
                                             chat_template=TEMPLATE)
    assert render_messages(loaded, MESSAGES, generation_prompt=True) == expected
    # A video conversation is refused whatever the template does with the setting.
    video = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]}]
    with pytest.raises(ProcessorUnavailable, match="video_processor.num_frames"):
        render_messages(loaded, video, generation_prompt=True)


def test_smolvlms_video_sampling_block_answers_num_frames_and_fps(tmp_path):
    """SmolVLM's video processor takes num_frames and fps from the video_sampling block its
    checkpoints ship (no num_frames key of its own)."""
    folder = _frames_folder(tmp_path, None)
    (folder / "video_preprocessor_config.json").write_text(json.dumps(
        {"video_sampling": {"max_frames": 64, "fps": 1, "video_size": {"longest_edge": 384}}}))
    loaded = _loaded(folder)
    assert loaded.processor.video_processor.num_frames == 64 and loaded.processor.video_processor.fps == 1
    assert "at most 64 frames" in render_messages(loaded, MESSAGES, generation_prompt=True)


class SlicingProcessor(FramesProcessor):
    """Reads a video setting in its own ``__init__``, as MiniCPM-V 4.6 does (slice_mode)."""

    def __init__(self, image_processor=None, tokenizer=None, video_processor=None, chat_template=None,
                 **kwargs):
        super().__init__(image_processor, tokenizer, video_processor, chat_template=chat_template)
        self.slice_mode = self.video_processor.slice_mode


def test_a_video_setting_read_in_the_processors_own_init_is_answered(tmp_path):
    folder = _frames_folder(tmp_path, None)
    (folder / "video_preprocessor_config.json").write_text(json.dumps({"slice_mode": "pad"}))
    processor = without_video(SlicingProcessor).from_pretrained(folder, local_files_only=True)
    assert processor.slice_mode == "pad" and processor.video_processor.slice_mode == "pad"
