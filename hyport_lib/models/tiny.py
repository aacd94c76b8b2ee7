"""The embedded default model (``model_path: tiny``): a tiny but real LLaVA checkpoint.

CLIP vision tower, Llama text model, random weights from a fixed seed, a byte-level BPE
tokenizer trained offline: saved with ``save_pretrained`` and loaded like a downloaded
checkpoint, so every stage runs end to end without network. LLaVA rather than Qwen2-VL:
Qwen2-VL's processor needs torchvision, which does not work beside CI's CPU torch. On random
weights a greedy token is a coin toss, so stages 02 and 04 say so instead of showing answers.
No torch at import: the report imports this.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional, Union

from hyport_lib.models.model_cache import build_once, cache_folder

#: Bump when the architecture, tokenizer, template, weights or saved files change: the
#: cache folder name carries it, so a new version regenerates the checkpoint.
TINY_MODEL_VERSION = 3
TINY_SEED = 0
#: The name users write in parameters to get this model.
TINY_MODEL_NAME = "tiny"
#: Written last into a finished checkpoint folder; its presence means "complete".
MARKER_FILE = "hyport_tiny.json"

_IMAGE_SIZE = 32
_PATCH_SIZE = 8


def tiny_model_dir(cache_dir: Optional[Union[str, os.PathLike]] = None,
                   *, max_shard_size: Optional[str] = None) -> Path:
    """A sharded copy (``max_shard_size``) has a folder of its own."""
    tag = str(max_shard_size or "").strip().upper()
    if max_shard_size is not None and not (tag[:1].isdigit() and tag.isalnum()):
        raise ValueError(f"max_shard_size={max_shard_size!r}: expected e.g. '100KB' or '2MB'")
    tail = f"-shards-{tag}" if max_shard_size is not None else ""
    return cache_folder(f"tiny-vlm-v{TINY_MODEL_VERSION}", cache_dir, tail)


def ensure_tiny_model(cache_dir: Optional[Union[str, os.PathLike]] = None,
                      *, max_shard_size: Optional[str] = None) -> Path:
    """The tiny checkpoint's folder, built first if it is not cached. ``max_shard_size`` (e.g.
    ``"100KB"``) saves the weights in shards, for the weights stage to exercise them."""
    folder = tiny_model_dir(cache_dir, max_shard_size=max_shard_size)
    return build_once(folder, MARKER_FILE, lambda tmp: _build(tmp, max_shard_size=max_shard_size),
                      "the tiny model")


def resolve_model_path(model_path: str) -> str:
    """``"tiny"`` becomes the embedded checkpoint's folder; a folder or a hub id stays as it is."""
    if not isinstance(model_path, (str, os.PathLike)) or not str(model_path).strip():
        raise ValueError(f"model_path={model_path!r}: expected 'tiny', a folder or a hub id")
    if str(model_path).strip() == TINY_MODEL_NAME:
        return str(ensure_tiny_model())
    return str(model_path)


def is_tiny_model(model_path) -> bool:
    """``"tiny"``, or a folder of the tiny checkpoint (its cache folder, a sharded copy): the
    folder is known by the marker :func:`ensure_tiny_model` writes last."""
    text = str(model_path).strip()
    if text == TINY_MODEL_NAME:
        return True
    try:
        return (Path(text).expanduser() / MARKER_FILE).is_file()
    except OSError:  # a folder this user may not list is no tiny checkpoint of theirs
        return False


# --- answers on random weights --------------------------------------------------------

#: Mean probability of the greedy token below which the logits are called flat.
FLAT_TOP1 = 0.2
RANDOM_WEIGHTS = "random weights: not meaningful"


def random_weights_reason(model_path: str, mean_top1: Optional[float] = None) -> Optional[str]:
    """Why answers of this model mean nothing, or None when they may."""
    if is_tiny_model(model_path):
        return f"{RANDOM_WEIGHTS} (the embedded tiny model)"
    if mean_top1 is not None and mean_top1 < FLAT_TOP1:
        return (f"{RANDOM_WEIGHTS} (the greedy token's mean probability is {mean_top1:.2f}: "
                "flat logits, as random weights give)")
    return None


# --- building ------------------------------------------------------------------------


def _build(out_dir: Path, *, max_shard_size: Optional[str]) -> None:
    import torch
    import transformers
    from transformers import GenerationConfig, LlavaForConditionalGeneration, LlavaProcessor

    started = time.perf_counter()
    tokenizer = build_tokenizer()
    processor = LlavaProcessor(
        image_processor=_image_processor(),
        tokenizer=tokenizer,
        patch_size=_PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # the CLS token, dropped by "default"
        image_token=IMAGE_TOKEN,
        chat_template=CHAT_TEMPLATE,
    )
    config = _model_config(tokenizer)
    # A private RNG state: building must not disturb the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        model = LlavaForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        suppress_tokens=invisible_token_ids(tokenizer),
    )
    save_kwargs = {"safe_serialization": True}
    if max_shard_size is not None:
        save_kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(out_dir, **save_kwargs)
    processor.save_pretrained(out_dir)
    marker = {
        "name": TINY_MODEL_NAME,
        "version": TINY_MODEL_VERSION,
        "seed": TINY_SEED,
        "architecture": type(model).__name__,
        "num_parameters": int(model.num_parameters()),
        "vocab_size": len(tokenizer),
        "max_shard_size": max_shard_size,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "build_s": round(time.perf_counter() - started, 3),
        "pid": os.getpid(),
    }
    (out_dir / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


def _model_config(tokenizer):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=_IMAGE_SIZE,
        patch_size=_PATCH_SIZE,
        projection_dim=32,
    )
    text = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, like current LLMs
        vocab_size=len(tokenizer),
        max_position_embeddings=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        projector_hidden_act="gelu",
    )


def _image_processor():
    # transformers 5 names the PIL/numpy implementation ...Pil (the plain name wants
    # torchvision); 4.x's plain CLIPImageProcessor is that implementation.
    try:
        from transformers import CLIPImageProcessorPil as ImageProcessor
    except ImportError:
        from transformers import CLIPImageProcessor as ImageProcessor
    return ImageProcessor(
        size={"shortest_edge": _IMAGE_SIZE},
        crop_size={"height": _IMAGE_SIZE, "width": _IMAGE_SIZE},
    )


# --- the tokenizer ---------------------------------------------------------------------
# A small byte-level BPE trained offline on sentences like the workbook's prompts, so the
# merges form English words and random weights still "say" word-like text.

#: Special tokens, in id order. ``<|im_end|>`` ends a turn (eos); ``<image>`` is the
#: placeholder the processor expands to one token per image patch.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>")
#: Ordinary added tokens (kept when decoding), as in Qwen3-style thinking templates.
THINK_TOKENS = ("<think>", "</think>")
IMAGE_TOKEN = "<image>"
BOS_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<pad>"
VOCAB_SIZE = 1024

# Why a chat template and not plain prompts: the reference script calls
# apply_chat_template(..., enable_thinking=...), and real checkpoints differ exactly here.
# With thinking off an empty think block is pre-filled, as Qwen3 and HY-Embodied do.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and not enable_thinking %}"
    "{{ '<think>\n\n</think>\n\n' }}"
    "{% endif %}{% endif %}"
)

_CORPUS = """\
Describe the image. The picture shows a red circle, a blue square and a green triangle.
The image is a small drawing with simple shapes and bright colours on a light background.
In the centre of the picture there is a yellow sun above a grey road.
This is a close-up, slightly high-angle shot of a white office desk with a laptop.
On the left side there is a window; on the right side there is a tall plant.
The colours are warm and the light comes from the top of the frame.
How do I open a fridge? Here are the standard steps to open a fridge door.
First, stand in front of the fridge. Then hold the handle and pull the door gently.
If the door is stuck, pull a little harder, then close it so the food stays cold.
The kitchen has a fridge, a sink, a table, two chairs and a cup of tea.
A robot arm picks up the cup and puts it on the table next to the plate.
The robot looks at the scene, plans the next step and moves its hand to the handle.
The model reads the image and the text, then writes an answer one token at a time.
Each card runs the same model and should give the same answer for the same prompt.
The training loss goes down step by step, and the weights are saved and loaded again.
Porting a model from CUDA to the NPU means replacing flash attention with a fused kernel.
Attention uses queries, keys and values; the mask keeps the model from seeing the future.
Ascend cards use torch_npu, CANN and HCCL; GPUs use CUDA and NCCL.
The answer is short and clear. The question is about what the picture shows.
There are three objects: a circle, a square and a triangle. They do not overlap.
The red shape is round, the blue shape has four corners and the green one has three.
Open the door, look inside, take the milk and close the door again.
Thinking step by step helps when the question needs a plan before the answer.
Please describe what you see in this picture in one or two sentences.
请描述这张图片。如何打开冰箱？图中有一个红色的圆形和一个蓝色的正方形。
"""


def train_byte_bpe(lines, special_tokens, vocab_size: int):
    """A byte-level BPE trained on ``lines``, its first ids being ``special_tokens`` in order."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        # The full byte alphabet: every input encodes, whatever its script.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(lines), trainer)
    return tokenizer


def build_tokenizer(vocab_size: int = VOCAB_SIZE):
    from transformers import PreTrainedTokenizerFast

    tokenizer = train_byte_bpe(_CORPUS.splitlines(), SPECIAL_TOKENS, vocab_size)
    tokenizer.add_tokens(list(THINK_TOKENS))

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        padding_side="left",
        model_max_length=1024,
        # Llama's inputs: without this, transformers 4.57 also returns token_type_ids,
        # which generate() then rejects as an unused model kwarg.
        model_input_names=["input_ids", "attention_mask"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def invisible_token_ids(tokenizer) -> list[int]:
    """Ids whose text is not visible on its own (special tokens, control bytes, partial
    UTF-8, whitespace): suppressed, so random weights still decode to readable text and
    never stop at eos after one token."""
    special = set(tokenizer.all_special_ids)
    hidden = []
    for token_id in range(len(tokenizer)):
        if token_id in special:
            hidden.append(token_id)
            continue
        text = tokenizer.decode([token_id])
        visible = bool(text.strip()) and "\ufffd" not in text and all(
            ch.isprintable() or ch in " \n" for ch in text
        )
        if not visible:
            hidden.append(token_id)
    return hidden
