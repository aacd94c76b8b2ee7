"""A zoo of tiny random-weight checkpoints of real transformers architectures.

Each entry is the family's own config, model, processor / image processor and chat
format, shrunk to hidden sizes of 32-64 and two layers, with a byte-level BPE
tokenizer trained offline that carries the special tokens the family's processor
and chat template need. Everything is built locally (nothing comes from the Hugging
Face hub) and written with ``save_pretrained``, so a folder loads through the Auto
classes like a downloaded checkpoint.

Public API::

    ZOO_NAMES                       # the entries, in a fixed order
    zoo_entry(name) -> ZooEntry     # what an entry is (class, multimodal, mrope, notes)
    build_checkpoint(name, out_dir) -> Path
    build_zoo(root, names=ZOO_NAMES) -> {name: Path}
    load_processor(folder)          # AutoProcessor, or the family's processor without
                                    # its video processor where AutoProcessor needs torchvision
    sample_image(size)              # a deterministic PIL picture

Without torchvision (CPU torch 2.13 here has no matching build), transformers 5 has
no video processors at all, and the Qwen-VL, LLaVA-OneVision and InternVL processors
cannot even be constructed with ``video_processor=None`` (the argument check looks up
``VideoProcessorMixin``, which is then absent). Those folders are saved by a
subclass of the family's processor, with the same class name, whose signature omits
the video processor: the files are those of the real processor minus
``video_preprocessor_config.json``. ``AutoProcessor.from_pretrained`` on them fails
exactly as it does for the real checkpoints on this stack; :func:`load_processor`
falls back to the video-less processor.

Pixtral goes further: ``transformers.models.pixtral.processing_pixtral`` imports
``image_processing_pixtral``, which imports ``torchvision.transforms.v2``, so without
torchvision ``transformers.PixtralProcessor`` is a placeholder that raises ImportError
when used and no subclass of it can be made. Its folder is written file by file as
mistral-community/pixtral-12b ships it (``processor_config.json`` with the processor's
own keys, ``preprocessor_config.json`` for ``PixtralImageProcessor``, tokenizer files
and the chat template); ``AutoProcessor.from_pretrained`` raises there, as it does for
the real checkpoint, and so does :func:`load_processor`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from hyport_lib.models.loading import has_torchvision, without_video
from hyport_lib.models.tiny import train_byte_bpe

try:  # imported as ``tests.zoo`` or, with tests/ on sys.path, as ``zoo``
    from . import zoo_templates as templates
except ImportError:  # pragma: no cover
    import zoo_templates as templates  # type: ignore[no-redef]

#: Written last into a finished folder: its presence means "complete".
MARKER_FILE = "zoo.json"
#: Seed of every entry's random weights.
SEED = 0
#: Version of the zoo's recipes, recorded in the marker.
ZOO_VERSION = 1

SAMPLE_IMAGE_SIZE = (64, 64)

# ---------------------------------------------------------------------------------------
# entries
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZooEntry:
    """What one zoo checkpoint is.

    Attributes:
        name: the zoo name (folder name under the zoo root).
        architecture: the model class name (``config.architectures[0]``).
        multimodal: image-text-to-text (True) or text-only causal LM (False).
        mrope: the text model takes multimodal rotary position ids (3 or 4 axes)
            computed from the image grids (Qwen-VL family, HunYuan-VL).
        notes: family notes (what is real, what was shrunk, quirks).
        model_type: ``config.model_type``.
        auto_model: the Auto class that loads it.
        processor_class: the processor class name (None for text-only entries).
        video_processor: the real processor also takes a video processor (which needs
            torchvision, so the zoo saves the folder without it).
        chat_template: whether the folder carries a chat template (PaliGemma: no).
        torchvision_processor: the processor class itself needs torchvision (Pixtral:
            transformers' processing module imports the torchvision image processor), so
            without it there is no processor to build or load; the folder then holds
            the files the real checkpoint ships, written by hand.
        packing_leak: the class name of the module that mixes tokens across samples in a
            packed row (position ids restarting per sample, no attention mask); "" where
            every sample's logits stay its own. Asserted by stage 04's packed plan on every
            entry (tests/models/test_zoo_stages.py, slow tier) and by
            tests/proof/test_isolation.py on the same classes built in-process.
    """

    name: str
    architecture: str
    multimodal: bool
    mrope: bool
    notes: str
    model_type: str = ""
    auto_model: str = ""
    processor_class: Optional[str] = None
    video_processor: bool = False
    chat_template: bool = True
    torchvision_processor: bool = False
    packing_leak: str = ""


_VLM = "AutoModelForImageTextToText"
_LM = "AutoModelForCausalLM"
_SEQ2SEQ = "AutoModelForSeq2SeqLM"

_ENTRIES = (
    ZooEntry("qwen2_vl", "Qwen2VLForConditionalGeneration", True, True,
             "Qwen2-VL: ViT with 14 px patches, temporal patch 2, 2x2 patch merger; M-RoPE "
             "(sections 2/3/3 of head_dim 16); ChatML with the default system prompt; "
             "<|vision_start|><|image_pad|><|vision_end|> per image.",
             "qwen2_vl", _VLM, "Qwen2VLProcessor", video_processor=True),
    ZooEntry("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", True, True,
             "Qwen2.5-VL: window-attention ViT (window 56 px, layer 1 full attention), "
             "SwiGLU vision MLP, RMSNorm; M-RoPE as Qwen2-VL; same chat format.",
             "qwen2_5_vl", _VLM, "Qwen2_5_VLProcessor", video_processor=True),
    ZooEntry("qwen3_vl", "Qwen3VLForConditionalGeneration", True, True,
             "Qwen3-VL: 16 px patches, learned position embeddings, DeepStack features "
             "from vision layer 0 injected into the text model; interleaved M-RoPE; "
             "Qwen3 text model (q/k norm, head_dim 16); ChatML without a default system prompt.",
             "qwen3_vl", _VLM, "Qwen3VLProcessor", video_processor=True),
    ZooEntry("llava_onevision", "LlavaOnevisionForConditionalGeneration", True, False,
             "LLaVA-OneVision: SigLIP tower (32 px, 8 px patches), anyres tiling with "
             "pinpoints up to 32x64 px plus image newlines, Qwen2 text model; ChatML with "
             "images first then text.",
             "llava_onevision", _VLM, "LlavaOnevisionProcessor", video_processor=True),
    ZooEntry("internvl", "InternVLForConditionalGeneration", True, False,
             "InternVL3 (HF-native): InternViT (64 px tiles, 8 px patches, layer scale), "
             "pixel-shuffle 0.5 projector, Qwen2 text model; <IMG_CONTEXT> expands to "
             "<img><IMG_CONTEXT>*16</img> per 64 px tile (crop_to_patches, at most 2 tiles "
             "plus a thumbnail); ChatML with <IMG_CONTEXT> on its own line, as InternVL3-hf.",
             "internvl", _VLM, "InternVLProcessor", video_processor=True),
    ZooEntry("hunyuan_vl", "HunYuanVLForConditionalGeneration", True, True,
             "HunYuan-VL (HunyuanOCR): native-resolution ViT (16 px patches, 2x2 conv "
             "merger, image newline/begin/end embeddings), HunYuan dense text model with "
             "4-axis XD-RoPE (NTK alpha); HunyuanOCR chat format (user turn closed by "
             "<｜hy_User｜>); image = start/<image>/end place-holders.",
             "hunyuan_vl", _VLM, "HunYuanVLProcessor"),
    ZooEntry("idefics3", "Idefics3ForConditionalGeneration", True, False,
             "Idefics3 / SmolVLM: SigLIP-like tower (64 px, 8 px patches), pixel-shuffle "
             "connector (scale 2), Llama text model; image splitting off; "
             "<fake_token_around_image><global-img><image>*16<fake_token_around_image>; "
             "SmolVLM's User:/Assistant: template.",
             "idefics3", _VLM, "Idefics3Processor"),
    ZooEntry("gemma3", "Gemma3ForConditionalGeneration", True, False,
             "Gemma 3: SigLIP tower (64 px, 8 px patches), 4x4 average pooling to 16 soft "
             "tokens, Gemma3 text model (sliding + global layers, q/k norm, bidirectional "
             "attention over image tokens); gemma-3-it turns with role 'model'.",
             "gemma3", _VLM, "Gemma3Processor"),
    ZooEntry("paligemma", "PaliGemmaForConditionalGeneration", True, False,
             "PaliGemma: SigLIP tower (64 px, 16 px patches -> 16 image tokens), Gemma text "
             "model (MQA), prefix-LM attention over image+prefix; NO chat template "
             "(prefix prompts such as 'answer en What is this?'); the processor adds the "
             "1024 <locXXXX> and 128 <segXXX> tokens to the vocabulary.",
             "paligemma", _VLM, "PaliGemmaProcessor", chat_template=False),
    ZooEntry("qwen3", "Qwen3ForCausalLM", False, False,
             "Qwen3 dense: GQA 4/2, q/k RMSNorm, tied embeddings; ChatML; enable_thinking=False "
             "pre-fills an empty think block.",
             "qwen3", _LM),
    ZooEntry("llama", "LlamaForCausalLM", False, False,
             "Llama 3: GQA 4/2, untied embeddings; Llama-3.1 header-id chat format; the "
             "tokenizer adds <|begin_of_text|> itself (the template writes bos too, and "
             "apply_chat_template does not add it twice).",
             "llama", _LM),
    ZooEntry("qwen3_moe", "Qwen3MoeForCausalLM", False, False,
             "Qwen3-MoE: 4 experts, top-2 routing, every layer sparse; ChatML as Qwen3.",
             "qwen3_moe", _LM),
    ZooEntry("hunyuan_dense", "HunYuanDenseV1ForCausalLM", False, False,
             "HunYuan dense v1 (Hunyuan-0.5B..7B-Instruct): GQA, q/k norm, NTK-alpha "
             "'dynamic' RoPE; <｜hy_User｜>/<｜hy_Assistant｜> chat format, eos = "
             "place-holder no. 2.",
             "hunyuan_v1_dense", _LM),
    ZooEntry("hunyuan_moe", "HunYuanMoEV1ForCausalLM", False, False,
             "HunYuan MoE v1 (Hunyuan-A13B): 4 experts top-2 plus a shared MLP; "
             "<|startoftext|> ... <|extra_0|> chat format, eos <|eos|>.",
             "hunyuan_v1_moe", _LM),
    ZooEntry("gemma2", "Gemma2ForCausalLM", False, False,
             "Gemma 2: attention logits soft-capped at 50 (transformers hands softcap=50.0 to "
             "the attention function) and final logits at 30; alternating sliding (window 8, "
             "shrunk from 4096 so that a 30-token prompt already exceeds it) and global "
             "layers; query_pre_attn_scalar = head_dim 16; GQA 4/2; tied embeddings; "
             "gemma-2-it turns with role 'model', and the template raises on a system "
             "message as the real one does.",
             "gemma2", _LM),
    ZooEntry("gpt_oss", "GptOssForCausalLM", False, False,
             "gpt-oss: learned per-head attention sinks (transformers hands s_aux=sinks to "
             "the attention function: an extra logit column in the softmax), alternating "
             "sliding (window 8, shrunk from 128) and full layers, biased q/k/v/o, GQA 4/2, "
             "YaRN RoPE (factor 32 over 64 positions); MoE with 4 experts top-2 (clamped "
             "SwiGLU). Harmony chat format cut to its plain-chat core (the real template is "
             "16 kB): no 'Current date:' line, and every answer closed by <|return|> where "
             "the real one closes earlier answers with <|end|> (not prefix-stable).",
             "gpt_oss", _LM),
    ZooEntry("deepseek_v3", "DeepseekV3ForCausalLM", False, False,
             "DeepSeek-V3: multi-head latent attention (q_lora_rank 32, kv_lora_rank 16) with "
             "query/key head dim 24 (16 no-rope + 8 interleaved-rope) but value head dim 16, "
             "so q/k and v have different head dims; YaRN RoPE with mscale_all_dim 1 (the "
             "softmax scale is 24**-0.5 times mscale**2, not 24**-0.5); layer 0 dense "
             "(first_k_dense_replace=1), layer 1 MoE with 4 routed experts in 2 groups, top-2, "
             "plus a shared expert; <｜User｜>/<｜Assistant｜> chat format.",
             "deepseek_v3", _LM),
    ZooEntry("mllama", "MllamaForConditionalGeneration", True, False,
             "Llama 3.2 Vision: the image is not in the token sequence (one <|image|> token "
             "marks it): text layer 1 of 3 cross-attends to the vision states, masked by the "
             "processor's cross_attention_mask (batch, text, images, tiles) and the gated "
             "tanh; vision tower of 32 px tiles, 8 px patches, at most 2 tiles (aspect ratios "
             "1x1, 1x2, 2x1; a square picture is one tile plus one masked padding tile), a "
             "1-layer gated global encoder and intermediate layer 0 concatenated; <|image|> "
             "is the last token id, one past the language model's vocabulary (the text "
             "embeddings have vocab + 8 rows, as the real model); Llama-3.2-Vision header "
             "turns, without the real template's look-ahead system block.",
             "mllama", _VLM, "MllamaProcessor"),
    ZooEntry("pixtral", "LlavaForConditionalGeneration", True, False,
             "Pixtral (mistral-community/pixtral-12b layout): LLaVA with a Pixtral vision "
             "tower (8 px patches, 2-D RoPE, native aspect ratio up to 48 px, several images "
             "in one sequence kept apart by a block-diagonal attention mask) and a Mistral "
             "text model; a picture becomes rows of [IMG] closed by [IMG_BREAK], the last by "
             "[IMG_END]. transformers' PixtralProcessor needs torchvision (its module imports "
             "the torchvision image processor): without it the folder's processor files are "
             "written by hand as the checkpoint ships them (processor_config.json, "
             "preprocessor_config.json, tokenizer, chat template). Mistral [INST] turns, with "
             "the system prompt in the first user turn where the real one puts it in the last.",
             "llava", _VLM, "PixtralProcessor", torchvision_processor=True),
    ZooEntry("lfm2", "Lfm2ForCausalLM", False, False,
             "LFM2 (LiquidAI/LFM2-350M): a short-convolution hybrid; layer 0 a gated depthwise "
             "convolution over the last 3 tokens (conv_L_cache 3), layer 1 GQA attention with q/k "
             "norm; tied embeddings; bos then ChatML turns, eos <|im_end|>. In a packed row the "
             "convolution reads the previous sample's last tokens.",
             "lfm2", _LM, packing_leak="Lfm2ShortConv"),
    ZooEntry("bamba", "BambaForCausalLM", False, False,
             "Bamba (ibm-ai-platform/Bamba-9B): a Mamba-2 hybrid; layer 0 a Mamba-2 mixer (8 heads "
             "of 16, state 16, conv kernel 4, chunks of 16 where the real one has 256), layer 1 "
             "attention with half-rotary RoPE; runs on CPU through the mixer's pure-torch path "
             "(no mamba_ssm / causal_conv1d). Llama 3 tokenizer and turns. In a packed row the "
             "convolution and the state carry the previous sample into the next.",
             "bamba", _LM, packing_leak="BambaMixer"),
    ZooEntry("llama4_text", "Llama4ForCausalLM", False, False,
             "Llama 4 text model: layer 0 RoPE with chunked attention (chunks of 16, real 8192) "
             "and a dense MLP, layer 1 without RoPE, full attention and the query temperature "
             "log1p(floor((i + 1) / floor_scale)) * attn_scale + 1 (floor_scale 8, real 8192), "
             "MoE with 4 experts top-1 plus a shared expert; q/k L2 norm; <|header_start|> turns "
             "closed by <|eot|>. Chunk edges and the temperature come from the position i in the "
             "row, not in the sample.",
             "llama4_text", _LM, packing_leak="Llama4TextAttention"),
    ZooEntry("gemma3n_text", "Gemma3nForCausalLM", False, False,
             "Gemma 3n text model: 3 layers (sliding window 16, full, and a sliding layer that "
             "reuses layer 0's keys and values: num_kv_shared_layers 1), AltUp with 4 streams, "
             "LAuReL, per-layer input embeddings, activation sparsity on layer 0, q/k/v norms, "
             "final logits soft-capped at 30; gemma-3 turns with role 'model'. The shared layer's "
             "own k/v projections are unused (no gradient).",
             "gemma3n_text", _LM),
    ZooEntry("bart", "BartForConditionalGeneration", False, False,
             "BART (facebook/bart-base layout): an encoder-decoder, 1 encoder layer and 1 decoder "
             "layer (self- and cross-attention), learned positions for 1024 tokens, tied "
             "embeddings; every text is <s> ... </s>, generation starts from </s> "
             "(decoder_start_token_id) and forces <s>; NO chat template (the real checkpoints "
             "have none). is_encoder_decoder is true in config.json.",
             "bart", _SEQ2SEQ, chat_template=False),
)

ZOO_NAMES: tuple[str, ...] = tuple(entry.name for entry in _ENTRIES)
_BY_NAME = {entry.name: entry for entry in _ENTRIES}


def zoo_entry(name: str) -> ZooEntry:
    """The :class:`ZooEntry` called ``name`` (KeyError with the valid names if none)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no zoo entry {name!r}; known: {', '.join(ZOO_NAMES)}") from None


# ---------------------------------------------------------------------------------------
# sample input
# ---------------------------------------------------------------------------------------


def sample_image(size: tuple[int, int] = SAMPLE_IMAGE_SIZE):
    """A deterministic RGB picture (sky, ground, red circle, blue square)."""
    from PIL import Image, ImageDraw

    width, height = size
    image = Image.new("RGB", (width, height), (200, 225, 250))
    draw = ImageDraw.Draw(image)
    draw.rectangle([0, height * 3 // 5, width, height], fill=(160, 140, 120))
    draw.ellipse([width // 10, height // 2, width * 2 // 5, height * 4 // 5], fill=(215, 40, 40))
    draw.rectangle([width // 2, height // 2, width * 3 // 4, height * 3 // 4], fill=(40, 80, 210))
    draw.ellipse([width * 3 // 4, height // 16, width * 15 // 16, height // 4], fill=(250, 210, 40))
    return image


# ---------------------------------------------------------------------------------------
# tokenizers
# ---------------------------------------------------------------------------------------

_CORPUS = """\
Describe the image. The picture shows a red circle, a blue square and a green triangle.
The image is a small drawing with simple shapes and bright colours on a light background.
In the centre of the picture there is a yellow sun above a grey road.
On the left side there is a window; on the right side there is a tall plant.
What is this? This is a photo of a kitchen with a fridge, a sink and a table.
How do I open a fridge? Stand in front of the fridge, hold the handle and pull the door.
The robot looks at the scene, plans the next step and moves its hand to the handle.
The model reads the image and the text, then writes an answer one token at a time.
The training loss goes down step by step, and the weights are saved and loaded again.
Porting a model to the NPU means replacing fused CUDA kernels with Ascend operators.
Attention uses queries, keys and values; the mask keeps the model from seeing the future.
The answer is short and clear. The question is about what the picture shows.
There are three objects: a circle, a square and a triangle. They do not overlap.
Please describe what you see in this picture in one or two sentences.
answer en What is this? caption en detect circle ; square segment the red shape.
You are a helpful assistant. Hello! How can I help you today?
def forward(self, x): return self.linear(x) + 1  # simple code in a sentence
The numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 appear in tables and charts.
请描述这张图片。图中有一个红色的圆形和一个蓝色的正方形。如何打开冰箱？
A cat is sleeping on a soft chair next to the window, while a dog watches the garden.
The weather today is sunny and warm, with a light wind from the west and no clouds.
Read the text in the document: the title, the date, the table of numbers and the signature.
Extract all text from this image and keep the reading order of the paragraphs.
The chart compares sales in spring, summer, autumn and winter for three different stores.
Translate the sentence into English, then explain the meaning of every important word.
A person walks across the street, carrying a bag of apples, bread, cheese and fresh milk.
The engineer checks the logs, compares the outputs of both devices and writes a report.
Mixed precision training uses bfloat16 weights, float32 master copies and a loss scale.
Gradients flow backward through every layer; the optimizer updates the parameters.
The vision encoder splits the picture into patches and turns each patch into a vector.
Rotary position embeddings rotate queries and keys by an angle that grows with position.
Experts in a mixture of experts layer are chosen by a router that scores every token.
The batch holds several sequences of different lengths, padded on the left side.
Where is the key? The key is under the blue book on the second shelf of the cupboard.
Count the objects: one circle, two squares, three triangles and four small yellow stars.
First preheat the oven, then mix flour, sugar, eggs and butter in a large bowl.
The train leaves the station at seven o'clock and arrives in the city before noon.
Children play football in the park; their parents sit on benches and talk quietly.
He opened the box and found an old letter, a silver coin and a photograph of a house.
Summarize the article in three sentences and list the main arguments of the author.
Is the statement true or false? Give a short reason for your answer.
The model should answer politely, admit when it does not know, and avoid making things up.
"""


def _train_bpe(special_tokens: list[str], vocab_size: int):
    """A byte-level BPE whose first ids are ``special_tokens`` (in order)."""
    return train_byte_bpe(_CORPUS.splitlines(), special_tokens, vocab_size)


def _build_tokenizer(
    *,
    special: Iterable[str],
    bos: Optional[str],
    eos: str,
    pad: str,
    unk: Optional[str] = None,
    named: Optional[dict[str, str]] = None,
    plain_added: Iterable[str] = (),
    special_last: Iterable[str] = (),
    chat_template: Optional[str] = None,
    add_bos: bool = False,
    vocab_size: int = 1024,
    padding_side: str = "left",
):
    """Train the BPE with ``special`` (plus bos/eos/pad/unk and ``named`` values) as
    special tokens and wrap it as a ``PreTrainedTokenizerFast``.

    Args:
        named: model-specific special tokens exposed as tokenizer attributes
            (``tokenizer.image_token`` / ``tokenizer.image_token_id`` ...), saved in
            ``tokenizer_config.json`` as the family's real tokenizers do.
        plain_added: ordinary added tokens (kept when decoding), e.g. ``<think>``.
        special_last: special tokens appended after the trained vocabulary, so they get
            the last ids (Llama-3.2-Vision's ``<|image|>`` is id ``vocab_size``, one past
            the language model's output rows).
        add_bos: prepend bos on every encode, as Llama-3 and Gemma tokenizers do.
    """
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    ordered: list[str] = []
    for token in [*(t for t in (bos, eos, pad, unk) if t), *special, *(named or {}).values()]:
        if token not in ordered:
            ordered.append(token)
    backend = _train_bpe(ordered, vocab_size)
    if plain_added:
        backend.add_tokens(list(plain_added))
    if special_last:
        backend.add_special_tokens(list(special_last))
    if add_bos:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, backend.token_to_id(bos))],
        )
    kwargs = dict(
        tokenizer_object=backend,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        padding_side=padding_side,
        model_max_length=4096,
        model_input_names=["input_ids", "attention_mask"],
    )
    if unk:
        kwargs["unk_token"] = unk
    extra = [t for t in [*special, *special_last] if t not in (bos, eos, pad, unk)]
    if extra:
        kwargs["extra_special_tokens"] = extra
    if named:
        kwargs["model_specific_special_tokens"] = dict(named)
    tokenizer = PreTrainedTokenizerFast(**kwargs)
    if add_bos:
        tokenizer.add_bos_token = True
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def _ids(tokenizer, *tokens: str) -> list[int]:
    ids = tokenizer.convert_tokens_to_ids(list(tokens))
    missing = [t for t, i in zip(tokens, ids) if i is None or i == tokenizer.unk_token_id]
    if missing:
        raise ValueError(f"tokens missing from the vocabulary: {missing}")
    return ids


# ---------------------------------------------------------------------------------------
# processors without a video processor
# ---------------------------------------------------------------------------------------

def load_processor(folder: os.PathLike, **kwargs):
    """The folder's processor: ``AutoProcessor.from_pretrained`` where it loads,
    else (a family whose processor wants a torchvision video processor) the
    family's processor class without one, from ``AutoImageProcessor`` +
    ``AutoTokenizer`` files. Text-only folders give their tokenizer.

    Raises:
        ImportError: a family whose processor class itself needs torchvision
            (``torchvision_processor``: Pixtral) on a stack without it.
    """
    import transformers
    from transformers import AutoProcessor, AutoTokenizer

    folder = Path(folder)
    kwargs.setdefault("local_files_only", True)
    marker = _read_json(folder / MARKER_FILE) or {}
    name = marker.get("name")
    entry = _BY_NAME.get(name) if name else None
    if entry is not None and not entry.multimodal:
        return AutoTokenizer.from_pretrained(folder, **kwargs)
    try:
        return AutoProcessor.from_pretrained(folder, **kwargs)
    except Exception:  # noqa: BLE001 — e.g. the video processor needs torchvision
        if entry is not None and entry.torchvision_processor:
            raise  # the processor class itself needs torchvision: there is nothing to fall back to
        config = _read_json(folder / "processor_config.json") or {}
        class_name = config.get("processor_class") or (entry.processor_class if entry else None)
        if not class_name:
            raise
        processor_class = getattr(transformers, class_name)
        return without_video(processor_class).from_pretrained(folder, **kwargs)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------
# shared sizes
# ---------------------------------------------------------------------------------------

_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
_HEAD_DIM = 16


def _special_ids(tokenizer) -> dict:
    return dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


# ---------------------------------------------------------------------------------------
# family recipes: each returns (model config, processor or tokenizer, model class)
# ---------------------------------------------------------------------------------------

_QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                 "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                 "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                 "<|image_pad|>", "<|video_pad|>"]


def _qwen_vl_tokenizer(template: str):
    return _build_tokenizer(special=_QWEN_SPECIAL, bos="<|endoftext|>", eos="<|im_end|>",
                            pad="<|endoftext|>", plain_added=["<think>", "</think>"],
                            chat_template=template)


def _qwen_vl_ids(tokenizer) -> dict:
    image, video, start, end = _ids(tokenizer, "<|image_pad|>", "<|video_pad|>",
                                    "<|vision_start|>", "<|vision_end|>")
    return dict(image_token_id=image, video_token_id=video,
                vision_start_token_id=start, vision_end_token_id=end)


def _qwen_image_processor(patch_size: int, merge_size: int = 2, mean_std: Optional[list] = None):
    from transformers import Qwen2VLImageProcessorPil

    factor = patch_size * merge_size
    # At least a 4x4 grid of merged tokens (16 image tokens: a 64 px picture is scaled
    # up to 4 * factor pixels), at most 6x6 (36) for larger pictures.
    kwargs = {"image_mean": mean_std, "image_std": mean_std} if mean_std else {}
    return Qwen2VLImageProcessorPil(
        patch_size=patch_size, merge_size=merge_size, temporal_patch_size=2,
        size={"shortest_edge": (factor * 4) ** 2, "longest_edge": (factor * 6) ** 2}, **kwargs,
    )


def _recipe_qwen2_vl():
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor

    tokenizer = _qwen_vl_tokenizer(templates.QWEN2_VL)
    text = dict(_TEXT, hidden_act="silu", rms_norm_eps=1e-6, **_special_ids(tokenizer),
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                 "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, hidden_act="quick_gelu")
    config = Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False,
                           **_qwen_vl_ids(tokenizer))
    processor = without_video(Qwen2VLProcessor)(
        image_processor=_qwen_image_processor(14), tokenizer=tokenizer, chat_template=templates.QWEN2_VL)
    return config, processor, Qwen2VLForConditionalGeneration


def _recipe_qwen2_5_vl():
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration,
                              Qwen2_5_VLProcessor)

    tokenizer = _qwen_vl_tokenizer(templates.QWEN2_VL)
    text = dict(_TEXT, hidden_act="silu", rms_norm_eps=1e-6, **_special_ids(tokenizer),
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                 "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                  fullatt_block_indexes=[1], tokens_per_second=2, hidden_act="silu")
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False,
                              **_qwen_vl_ids(tokenizer))
    processor = without_video(Qwen2_5_VLProcessor)(
        image_processor=_qwen_image_processor(14), tokenizer=tokenizer, chat_template=templates.QWEN2_VL)
    return config, processor, Qwen2_5_VLForConditionalGeneration


def _recipe_qwen3_vl():
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor

    tokenizer = _qwen_vl_tokenizer(templates.QWEN3_VL)
    text = dict(_TEXT, head_dim=_HEAD_DIM, hidden_act="silu", rms_norm_eps=1e-6,
                pad_token_id=tokenizer.pad_token_id, vocab_size=len(tokenizer),
                rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                 "mrope_section": [4, 2, 2], "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                  num_position_embeddings=64, deepstack_visual_indexes=[0])
    config = Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True,
                           **_qwen_vl_ids(tokenizer))
    config.text_config.bos_token_id = tokenizer.bos_token_id
    config.text_config.eos_token_id = tokenizer.eos_token_id
    processor = without_video(Qwen3VLProcessor)(
        image_processor=_qwen_image_processor(16, mean_std=[0.5, 0.5, 0.5]), tokenizer=tokenizer,
        chat_template=templates.QWEN3_VL)
    return config, processor, Qwen3VLForConditionalGeneration


def _recipe_llava_onevision():
    from transformers import (LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration,
                              LlavaOnevisionImageProcessorPil, LlavaOnevisionProcessor)

    tokenizer = _build_tokenizer(special=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"],
                                 bos="<|endoftext|>", eos="<|im_end|>", pad="<|endoftext|>",
                                 named={"image_token": "<image>", "video_token": "<video>"},
                                 chat_template=templates.LLAVA_ONEVISION)
    image_size, patch = 32, 8
    # Without a 64x64 pinpoint a square picture is one 32 px tile: 16 base + 4x4
    # unpadded + 4 newline features = 36 image tokens (wide/tall pictures get 2 tiles).
    pinpoints = [[32, 32], [32, 64], [64, 32]]
    image_processor = LlavaOnevisionImageProcessorPil(
        size={"height": image_size, "width": image_size}, image_grid_pinpoints=pinpoints,
        do_pad=True)
    text = dict(_TEXT, model_type="qwen2", **_special_ids(tokenizer))
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=2, image_size=image_size, patch_size=patch,
                  vision_use_head=False)
    image_id, video_id = _ids(tokenizer, "<image>", "<video>")
    config = LlavaOnevisionConfig(text_config=text, vision_config=vision, image_token_index=image_id,
                                  video_token_index=video_id, image_grid_pinpoints=pinpoints,
                                  vision_feature_select_strategy="full", vision_feature_layer=-1,
                                  vision_aspect_ratio="anyres_max_9", tie_word_embeddings=False)
    processor = without_video(LlavaOnevisionProcessor)(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=templates.LLAVA_ONEVISION,
        num_image_tokens=(image_size // patch) ** 2, vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9")
    return config, processor, LlavaOnevisionForConditionalGeneration


def _recipe_internvl():
    from transformers import (GotOcr2ImageProcessorPil, InternVLConfig,
                              InternVLForConditionalGeneration, InternVLProcessor)

    named = {"start_image_token": "<img>", "end_image_token": "</img>",
             "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"}
    tokenizer = _build_tokenizer(special=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>",
                                          "<IMG_CONTEXT>", "<video>", "<quad>", "</quad>", "<ref>", "</ref>",
                                          "<box>", "</box>"],
                                 bos="<|endoftext|>", eos="<|im_end|>", pad="<|endoftext|>", named=named,
                                 chat_template=templates.INTERNVL)
    image_size, patch, ratio = 64, 8, 0.5
    image_seq_length = int((image_size // patch) ** 2 * ratio ** 2)
    image_processor = GotOcr2ImageProcessorPil(size={"height": image_size, "width": image_size},
                                               crop_to_patches=True, min_patches=1, max_patches=2)
    text = dict(_TEXT, model_type="qwen2", **_special_ids(tokenizer))
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  image_size=[image_size, image_size], patch_size=[patch, patch],
                  norm_type="layer_norm", use_mean_pooling=True)
    config = InternVLConfig(text_config=text, vision_config=vision,
                            image_token_id=_ids(tokenizer, "<IMG_CONTEXT>")[0],
                            image_seq_length=image_seq_length, downsample_ratio=ratio,
                            tie_word_embeddings=False)
    processor = without_video(InternVLProcessor)(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=templates.INTERNVL,
        image_seq_length=image_seq_length)
    return config, processor, InternVLForConditionalGeneration


def _recipe_hunyuan_vl():
    from transformers import (HunYuanVLConfig, HunYuanVLForConditionalGeneration,
                              HunYuanVLImageProcessorPil, HunYuanVLProcessor)

    t = templates
    newline = "<｜hy_place▁holder▁no▁103｜>"
    named = {"image_start_token": t.HY_IMAGE_START, "image_end_token": t.HY_IMAGE_END,
             "image_token": t.HY_IMAGE}
    tokenizer = _build_tokenizer(special=[t.HY_BOS, t.HY_EOS, t.HY_PAD, t.HY_USER, t.HY_ASSISTANT,
                                          t.HY_SYSTEM_END, t.HY_IMAGE_START, t.HY_IMAGE_END, t.HY_IMAGE,
                                          newline],
                                 bos=t.HY_BOS, eos=t.HY_EOS, pad=t.HY_PAD, named=named,
                                 chat_template=t.HUNYUAN_VL)
    patch, merge = 16, 2
    factor = patch * merge
    # A 64 px picture is scaled up to 96 px: 6x6 patches -> 3 rows of (3 merged tokens
    # + a newline) + begin/end = 14 image tokens; at most 4 rows of (4 + 1) + 2 = 22.
    image_processor = HunYuanVLImageProcessorPil(patch_size=patch, merge_size=merge, temporal_patch_size=1,
                                                 min_pixels=(factor * 3) ** 2, max_pixels=(factor * 4) ** 2)
    text = dict(_TEXT, head_dim=_HEAD_DIM, **_special_ids(tokenizer), eod_token_id=tokenizer.eos_token_id,
                sep_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
                rope_parameters={"rope_type": "xdrope", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0,
                                 "xdrope_section": [2, 2, 2, 2]})
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  patch_size=patch, spatial_merge_size=merge, temporal_patch_size=1, out_hidden_size=64,
                  max_image_size=factor * 4, min_image_size=factor, img_max_token_num=64,
                  max_vit_seq_len=256)
    start, end, image, nl = _ids(tokenizer, t.HY_IMAGE_START, t.HY_IMAGE_END, t.HY_IMAGE, newline)
    config = HunYuanVLConfig(text_config=text, vision_config=vision, image_token_id=image,
                             im_start_id=start, im_end_id=end, im_newline_id=nl, tie_word_embeddings=True)
    processor = HunYuanVLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                   chat_template=t.HUNYUAN_VL)
    return config, processor, HunYuanVLForConditionalGeneration


def idefics3_tokenizer():
    """The Idefics3 / SmolVLM tokenizer: image tokens, tile tokens, ChatML-like turns."""
    rows_cols = [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
    return _build_tokenizer(special=["<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                     "<fake_token_around_image>", "<image>", "<end_of_utterance>",
                                     "<global-img>", *rows_cols],
                            bos="<|im_start|>", eos="<end_of_utterance>", pad="<|im_end|>",
                            unk="<|endoftext|>", chat_template=templates.IDEFICS3)


def _recipe_idefics3():
    from transformers import (Idefics3Config, Idefics3ForConditionalGeneration,
                              Idefics3ImageProcessorPil, Idefics3Processor)

    tokenizer = idefics3_tokenizer()
    image_size, patch, scale = 64, 8, 2
    image_seq_len = (image_size // patch) ** 2 // scale ** 2
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False, size={"longest_edge": image_size},
        max_image_size={"longest_edge": image_size})
    text = dict(_TEXT, model_type="llama", **_special_ids(tokenizer), tie_word_embeddings=False)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  image_size=image_size, patch_size=patch)
    config = Idefics3Config(text_config=text, vision_config=vision, scale_factor=scale,
                            image_token_id=_ids(tokenizer, "<image>")[0], tie_word_embeddings=False,
                            pad_token_id=tokenizer.pad_token_id)
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer,
                                  image_seq_len=image_seq_len, chat_template=templates.IDEFICS3)
    return config, processor, Idefics3ForConditionalGeneration


def _recipe_gemma3():
    from transformers import (Gemma3Config, Gemma3ForConditionalGeneration,
                              Gemma3ImageProcessorPil, Gemma3Processor)

    named = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
             "image_token": "<image_soft_token>"}
    tokenizer = _build_tokenizer(special=["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
                                          "<end_of_turn>", "<start_of_image>", "<end_of_image>",
                                          "<image_soft_token>"],
                                 bos="<bos>", eos="<eos>", pad="<pad>", unk="<unk>", named=named,
                                 chat_template=templates.GEMMA3, add_bos=True)
    image_size, patch, tokens = 64, 8, 16
    image_processor = Gemma3ImageProcessorPil(size={"height": image_size, "width": image_size},
                                              do_pan_and_scan=False)
    text = dict(_TEXT, head_dim=_HEAD_DIM, query_pre_attn_scalar=_HEAD_DIM, sliding_window=64,
                layer_types=["sliding_attention", "full_attention"], **_special_ids(tokenizer),
                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                 "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=2, image_size=image_size, patch_size=patch,
                  vision_use_head=False)
    boi, eoi, image = _ids(tokenizer, "<start_of_image>", "<end_of_image>", "<image_soft_token>")
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=tokens,
                          boi_token_index=boi, eoi_token_index=eoi, image_token_index=image,
                          tie_word_embeddings=True)
    processor = Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer,
                                chat_template=templates.GEMMA3, image_seq_length=tokens)
    return config, processor, Gemma3ForConditionalGeneration


def _recipe_paligemma():
    from transformers import (PaliGemmaConfig, PaliGemmaForConditionalGeneration, PaliGemmaProcessor,
                              SiglipImageProcessorPil)

    # 896 trained ids + the 1152 <loc>/<seg> tokens the processor adds = ~2048.
    tokenizer = _build_tokenizer(special=["<pad>", "<eos>", "<bos>", "<unk>", "<image>"],
                                 bos="<bos>", eos="<eos>", pad="<pad>", unk="<unk>",
                                 named={"image_token": "<image>"}, vocab_size=896, padding_side="right")
    image_size, patch = 64, 16
    seq = (image_size // patch) ** 2
    image_processor = SiglipImageProcessorPil(size={"height": image_size, "width": image_size},
                                              image_seq_length=seq)
    image_processor.image_seq_length = seq
    processor = PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer)
    tokenizer = processor.tokenizer  # now with the <loc>/<seg> tokens
    text = dict(model_type="gemma", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=1, head_dim=_HEAD_DIM,
                max_position_embeddings=2048, **_special_ids(tokenizer))
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=2, image_size=image_size, patch_size=patch,
                  projection_dim=64, vision_use_head=False)
    config = PaliGemmaConfig(text_config=text, vision_config=vision,
                             image_token_index=_ids(tokenizer, "<image>")[0], vocab_size=len(tokenizer),
                             projection_dim=64, hidden_size=64, tie_word_embeddings=True)
    return config, processor, PaliGemmaForConditionalGeneration


def _qwen_text_tokenizer():
    return _build_tokenizer(special=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                            bos="<|endoftext|>", eos="<|im_end|>", pad="<|endoftext|>",
                            plain_added=["<think>", "</think>", "<tool_call>", "</tool_call>"],
                            chat_template=templates.QWEN3)


def _recipe_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = _qwen_text_tokenizer()
    config = Qwen3Config(**_TEXT, head_dim=_HEAD_DIM, **_special_ids(tokenizer), tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    return config, tokenizer, Qwen3ForCausalLM


def _recipe_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    reserved = [f"<|reserved_special_token_{i}|>" for i in range(4)]
    tokenizer = _build_tokenizer(special=["<|begin_of_text|>", "<|end_of_text|>", *reserved,
                                          "<|finetune_right_pad_id|>", "<|start_header_id|>",
                                          "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"],
                                 bos="<|begin_of_text|>", eos="<|eot_id|>", pad="<|finetune_right_pad_id|>",
                                 chat_template=templates.LLAMA3, add_bos=True)
    config = LlamaConfig(**_TEXT, **_special_ids(tokenizer), tie_word_embeddings=False,
                         rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    return config, tokenizer, LlamaForCausalLM


def _recipe_qwen3_moe():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    tokenizer = _qwen_text_tokenizer()
    config = Qwen3MoeConfig(**_TEXT, head_dim=_HEAD_DIM, **_special_ids(tokenizer), tie_word_embeddings=False,
                            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                            decoder_sparse_step=1, norm_topk_prob=True, mlp_only_layers=[],
                            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    return config, tokenizer, Qwen3MoeForCausalLM


def _hy_dense_tokenizer(template: str):
    t = templates
    return _build_tokenizer(special=[t.HY_BOS, t.HY_EOS, t.HY_PAD, t.HY_USER, t.HY_ASSISTANT,
                                     t.HY_SYSTEM_END],
                            bos=t.HY_BOS, eos=t.HY_EOS, pad=t.HY_PAD,
                            plain_added=["<think>", "</think>", "<answer>", "</answer>"],
                            chat_template=template)


def _recipe_hunyuan_dense():
    from transformers import HunYuanDenseV1Config, HunYuanDenseV1ForCausalLM

    tokenizer = _hy_dense_tokenizer(templates.HUNYUAN_DENSE)
    config = HunYuanDenseV1Config(**_TEXT, head_dim=_HEAD_DIM, **_special_ids(tokenizer),
                                  eod_token_id=tokenizer.eos_token_id, tie_word_embeddings=True,
                                  rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0,
                                                   "alpha": 1000.0, "factor": 1.0})
    return config, tokenizer, HunYuanDenseV1ForCausalLM


def _recipe_hunyuan_moe():
    from transformers import HunYuanMoEV1Config, HunYuanMoEV1ForCausalLM

    extras = [f"<|extra_{i}|>" for i in range(6)]
    tokenizer = _build_tokenizer(special=["<|startoftext|>", "<|eos|>", "<|pad|>", *extras],
                                 bos="<|startoftext|>", eos="<|eos|>", pad="<|pad|>",
                                 plain_added=["<think>", "</think>", "<answer>", "</answer>"],
                                 chat_template=templates.HUNYUAN_MOE)
    config = HunYuanMoEV1Config(**_TEXT, head_dim=_HEAD_DIM, **_special_ids(tokenizer),
                                eod_token_id=tokenizer.eos_token_id, sep_token_id=tokenizer.pad_token_id,
                                tie_word_embeddings=True, num_experts=4, moe_topk=2,
                                rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0,
                                                 "alpha": 1000.0, "factor": 1.0})
    return config, tokenizer, HunYuanMoEV1ForCausalLM


def _recipe_gemma2():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    tokenizer = _build_tokenizer(special=["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
                                          "<end_of_turn>"],
                                 bos="<bos>", eos="<eos>", pad="<pad>", unk="<unk>",
                                 chat_template=templates.GEMMA2, add_bos=True)
    # A window of 8 (real: 4096) so that the zoo's ~30-token prompts reach past it: a
    # drop-in attention that ignores the window gives other logits on layer 0.
    config = Gemma2Config(**_TEXT, head_dim=_HEAD_DIM, query_pre_attn_scalar=_HEAD_DIM, sliding_window=8,
                          layer_types=["sliding_attention", "full_attention"], attn_logit_softcapping=50.0,
                          final_logit_softcapping=30.0, **_special_ids(tokenizer), tie_word_embeddings=True,
                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return config, tokenizer, Gemma2ForCausalLM


def _recipe_gpt_oss():
    from transformers import GptOssConfig, GptOssForCausalLM

    harmony = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
               "<|start|>", "<|end|>", "<|message|>", "<|call|>"]
    tokenizer = _build_tokenizer(special=harmony, bos="<|startoftext|>", eos="<|return|>",
                                 pad="<|endoftext|>", chat_template=templates.GPT_OSS)
    # YaRN as the real config (factor 32 over 4096 positions), over 64 here: the
    # same inv_freq blend and attention factor on a shorter original context.
    config = GptOssConfig(**{**_TEXT, "intermediate_size": 64}, head_dim=_HEAD_DIM, sliding_window=8,
                          layer_types=["sliding_attention", "full_attention"], num_local_experts=4,
                          num_experts_per_tok=2, **_special_ids(tokenizer), tie_word_embeddings=False,
                          rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                           "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                           "original_max_position_embeddings": 64})
    return config, tokenizer, GptOssForCausalLM


def _recipe_deepseek_v3():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    t = templates
    tokenizer = _build_tokenizer(special=[t.DS_BOS, t.DS_EOS, t.DS_PAD, t.DS_USER, t.DS_ASSISTANT],
                                 bos=t.DS_BOS, eos=t.DS_EOS, pad=t.DS_PAD,
                                 plain_added=["<think>", "</think>"], chat_template=t.DEEPSEEK_V3,
                                 add_bos=True)
    # MLA: q/k heads of 16 + 8 = 24 against v heads of 16 (real: 128 + 64 against 128),
    # so an attention that assumes one head dim for q, k and v is caught. YaRN with
    # mscale_all_dim as the real config: the softmax scale is not head_dim ** -0.5.
    config = DeepseekV3Config(**{**_TEXT, "num_key_value_heads": 4}, q_lora_rank=32, kv_lora_rank=16,
                              qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, rope_interleave=True,
                              n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=2,
                              topk_group=1, moe_intermediate_size=32, first_k_dense_replace=1,
                              routed_scaling_factor=2.5, norm_topk_prob=True, **_special_ids(tokenizer),
                              tie_word_embeddings=False,
                              rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 32.0,
                                               "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                                               "mscale_all_dim": 1.0,
                                               "original_max_position_embeddings": 64})
    return config, tokenizer, DeepseekV3ForCausalLM


def _recipe_mllama():
    from transformers import (MllamaConfig, MllamaForConditionalGeneration, MllamaImageProcessorPil,
                              MllamaProcessor)

    reserved = [f"<|reserved_special_token_{i}|>" for i in range(4)]
    # <|image|> goes last: its id is the text config's vocab_size, one past the language
    # model's output rows, as in the real checkpoint (128256 of 128256 + 8 embeddings).
    tokenizer = _build_tokenizer(special=["<|begin_of_text|>", "<|end_of_text|>", *reserved,
                                          "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>",
                                          "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"],
                                 bos="<|begin_of_text|>", eos="<|eot_id|>", pad="<|finetune_right_pad_id|>",
                                 special_last=["<|image|>"], chat_template=templates.MLLAMA, add_bos=True)
    tile, patch, tiles = 32, 8, 2
    image_id = _ids(tokenizer, "<|image|>")[0]
    # max_image_tiles 2: aspect ratios (1,1), (1,2), (2,1), in the processor's order (the
    # aspect_ratio_ids index it); a 64 px square is resized into one tile, the second
    # tile is padding that aspect_ratio_mask and cross_attention_mask mask out.
    image_processor = MllamaImageProcessorPil(size={"height": tile, "width": tile}, max_image_tiles=tiles)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_global_layers=1,
                  attention_heads=2, image_size=tile, patch_size=patch, max_num_tiles=tiles,
                  supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]], intermediate_layers_indices=[0],
                  vision_output_dim=32 * 2)
    text = dict(_TEXT, num_hidden_layers=3, cross_attention_layers=[1], vocab_size=image_id,
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    config = MllamaConfig(vision_config=vision, text_config=text, image_token_index=image_id,
                          tie_word_embeddings=False)
    processor = MllamaProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                chat_template=templates.MLLAMA)
    return config, processor, MllamaForConditionalGeneration


def _recipe_lfm2():
    from transformers import Lfm2Config, Lfm2ForCausalLM

    specials = ["<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
                "<|tool_call_start|>", "<|tool_call_end|>"]
    tokenizer = _build_tokenizer(special=specials, bos="<|startoftext|>", eos="<|im_end|>", pad="<|pad|>",
                                 chat_template=templates.LFM2, add_bos=True)
    # One short-convolution layer (kernel 3, as LFM2-350M) and one attention layer: the
    # convolution reads the previous tokens of the row, whichever sample they belong to.
    config = Lfm2Config(**_TEXT, **_special_ids(tokenizer), layer_types=["conv", "full_attention"],
                        conv_L_cache=3, conv_bias=False, block_auto_adjust_ff_dim=False,
                        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    return config, tokenizer, Lfm2ForCausalLM


def _recipe_bamba():
    from transformers import BambaConfig, BambaForCausalLM

    reserved = [f"<|reserved_special_token_{i}|>" for i in range(4)]
    # Bamba-9B uses the Llama 3 tokenizer and, for its instruct variants, the Llama 3 turns.
    tokenizer = _build_tokenizer(special=["<|begin_of_text|>", "<|end_of_text|>", *reserved,
                                          "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
                                 bos="<|begin_of_text|>", eos="<|eot_id|>", pad="<|end_of_text|>",
                                 chat_template=templates.LLAMA3, add_bos=True)
    # Layer 0 a Mamba-2 mixer (8 heads of 16 over the 2x expanded width, one group, state
    # 16, conv kernel 4), layer 1 attention. Chunks of 16 (real: 256) so that a 64-token
    # row crosses chunk edges; the pure-torch path runs without mamba_ssm/causal_conv1d.
    config = BambaConfig(**_TEXT, **_special_ids(tokenizer), attn_layer_indices=[1], mamba_n_heads=8,
                         mamba_d_head=16, mamba_n_groups=1, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
                         mamba_chunk_size=16, tie_word_embeddings=False,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "partial_rotary_factor": 0.5})
    return config, tokenizer, BambaForCausalLM


def _recipe_llama4_text():
    from transformers import Llama4ForCausalLM, Llama4TextConfig

    reserved = [f"<|reserved_special_token_{i}|>" for i in range(4)]
    tokenizer = _build_tokenizer(special=["<|begin_of_text|>", "<|end_of_text|>", *reserved,
                                          "<|finetune_right_pad|>", "<|header_start|>", "<|header_end|>",
                                          "<|eom|>", "<|eot|>", "<|python_start|>", "<|python_end|>"],
                                 bos="<|begin_of_text|>", eos="<|eot|>", pad="<|finetune_right_pad|>",
                                 chat_template=templates.LLAMA4, add_bos=True)
    # Layer 0: RoPE, chunked attention (chunks of 16, real 8192), dense MLP; layer 1: no
    # RoPE, full attention with the temperature log1p(floor((i + 1) / 8)) * 0.1 + 1 on
    # the queries (floor_scale 8, real 8192), MoE (4 experts top-1 plus the shared one),
    # as Maverick interleaves them. Both read the position i in the row.
    config = Llama4TextConfig(**_TEXT, intermediate_size_mlp=128, head_dim=_HEAD_DIM,
                              **_special_ids(tokenizer), no_rope_layers=[1, 0], attention_chunk_size=16,
                              attn_temperature_tuning=True, floor_scale=8, attn_scale=0.1,
                              num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2,
                              use_qk_norm=True, tie_word_embeddings=False,
                              rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    return config, tokenizer, Llama4ForCausalLM


def _recipe_gemma3n_text():
    from transformers import Gemma3nForCausalLM, Gemma3nTextConfig

    tokenizer = _build_tokenizer(special=["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
                                          "<end_of_turn>"],
                                 bos="<bos>", eos="<eos>", pad="<pad>", unk="<unk>",
                                 chat_template=templates.GEMMA3, add_bos=True)
    # Three layers, the fewest that show each kind: sliding (window 16, real 512), full,
    # and a sliding layer that computes no keys and values of its own but reuses layer
    # 0's (num_kv_shared_layers=1; a shared layer's type must have an unshared producer).
    # AltUp (4 streams), LAuReL (rank 8, real 64), per-layer inputs (16, real 256) and
    # the activation sparsity of the first layer as the real E2B's first layers.
    vocab = len(tokenizer)
    config = Gemma3nTextConfig(**_TEXT | {"num_hidden_layers": 3}, head_dim=_HEAD_DIM, **_special_ids(tokenizer),
                               vocab_size_per_layer_input=vocab, hidden_size_per_layer_input=16,
                               layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                               sliding_window=16, num_kv_shared_layers=1, laurel_rank=8, altup_num_inputs=4,
                               activation_sparsity_pattern=[0.95, 0.0, 0.0], final_logit_softcapping=30.0,
                               tie_word_embeddings=True)
    return config, tokenizer, Gemma3nForCausalLM


def _recipe_bart():
    from tokenizers import processors
    from transformers import BartConfig, BartForConditionalGeneration

    tokenizer = _build_tokenizer(special=["<s>", "<pad>", "</s>", "<unk>"], bos="<s>", eos="</s>", pad="<pad>",
                                 unk="<unk>", special_last=["<mask>"], padding_side="right")
    # As BartTokenizer: every text is <s> ... </s>.
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", tokenizer.bos_token_id), ("</s>", tokenizer.eos_token_id)])
    # One encoder layer and one decoder layer (self- and cross-attention), the fewest
    # that show each kind; learned positions for 1024 tokens as bart-base.
    config = BartConfig(vocab_size=len(tokenizer), d_model=64, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                        decoder_ffn_dim=128, max_position_embeddings=1024, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                        decoder_start_token_id=tokenizer.eos_token_id, forced_eos_token_id=tokenizer.eos_token_id,
                        tie_word_embeddings=True)
    return config, tokenizer, BartForConditionalGeneration


class _ProcessorFiles:
    """Writes what a processor's ``save_pretrained`` would, for a family whose processor
    class cannot be built here (Pixtral without torchvision): the files are those the
    real checkpoint ships, in its layout (the image processor in
    ``preprocessor_config.json``, the processor's own keys in ``processor_config.json``)."""

    def __init__(self, tokenizer, image_processor, processor_config: dict):
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.processor_config = processor_config

    def save_pretrained(self, out_dir: os.PathLike) -> None:
        out_dir = Path(out_dir)
        self.tokenizer.save_pretrained(out_dir)
        self.image_processor.save_pretrained(out_dir)
        # The hub checkpoint's preprocessor_config.json names its processor too.
        path = out_dir / "preprocessor_config.json"
        image_config = json.loads(path.read_text(encoding="utf-8"))
        image_config["processor_class"] = self.processor_config["processor_class"]
        path.write_text(json.dumps(image_config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (out_dir / "processor_config.json").write_text(
            json.dumps(self.processor_config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _recipe_pixtral():
    from transformers import LlavaConfig, LlavaForConditionalGeneration, PixtralImageProcessorPil

    specials = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
                "[IMG_END]"]
    tokenizer = _build_tokenizer(special=specials, bos="<s>", eos="</s>", pad="<pad>", unk="<unk>",
                                 chat_template=templates.PIXTRAL, add_bos=True)
    patch, longest = 8, 48
    image_processor = PixtralImageProcessorPil(size={"longest_edge": longest},
                                               patch_size={"height": patch, "width": patch})
    text = dict(_TEXT, model_type="mistral", head_dim=_HEAD_DIM, sliding_window=None,
                **_special_ids(tokenizer), rope_parameters={"rope_type": "default", "rope_theta": 1e9})
    vision = dict(model_type="pixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, head_dim=16, image_size=longest, patch_size=patch,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    config = LlavaConfig(text_config=text, vision_config=vision, image_token_index=_ids(tokenizer, "[IMG]")[0],
                         image_seq_length=1, projector_hidden_act="gelu", vision_feature_layer=-1,
                         vision_feature_select_strategy="full", multimodal_projector_bias=True,
                         tie_word_embeddings=False)
    kwargs = dict(patch_size=patch, image_token="[IMG]", image_break_token="[IMG_BREAK]",
                  image_end_token="[IMG_END]")
    if has_torchvision():
        from transformers import PixtralProcessor

        processor = PixtralProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                     chat_template=templates.PIXTRAL, **kwargs)
    else:
        # transformers.PixtralProcessor is then a placeholder: processing_pixtral imports
        # image_processing_pixtral, which imports torchvision.transforms.v2.
        processor = _ProcessorFiles(tokenizer, image_processor,
                                    dict(kwargs, processor_class="PixtralProcessor"))
    return config, processor, LlavaForConditionalGeneration


_RECIPES: dict[str, Callable] = {
    "qwen2_vl": _recipe_qwen2_vl,
    "qwen2_5_vl": _recipe_qwen2_5_vl,
    "qwen3_vl": _recipe_qwen3_vl,
    "llava_onevision": _recipe_llava_onevision,
    "internvl": _recipe_internvl,
    "hunyuan_vl": _recipe_hunyuan_vl,
    "idefics3": _recipe_idefics3,
    "gemma3": _recipe_gemma3,
    "paligemma": _recipe_paligemma,
    "qwen3": _recipe_qwen3,
    "llama": _recipe_llama,
    "qwen3_moe": _recipe_qwen3_moe,
    "hunyuan_dense": _recipe_hunyuan_dense,
    "hunyuan_moe": _recipe_hunyuan_moe,
    "gemma2": _recipe_gemma2,
    "gpt_oss": _recipe_gpt_oss,
    "deepseek_v3": _recipe_deepseek_v3,
    "mllama": _recipe_mllama,
    "pixtral": _recipe_pixtral,
    "lfm2": _recipe_lfm2,
    "bamba": _recipe_bamba,
    "llama4_text": _recipe_llama4_text,
    "gemma3n_text": _recipe_gemma3n_text,
    "bart": _recipe_bart,
}
assert tuple(_RECIPES) == ZOO_NAMES


# ---------------------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------------------


def build_checkpoint(name: str, out_dir: os.PathLike) -> Path:
    """Build zoo entry ``name`` into ``out_dir`` (created; existing files overwritten).

    Writes the model (``config.json``, ``model.safetensors``,
    ``generation_config.json``), the processor or tokenizer files and, last,
    ``zoo.json`` (name, architecture, multimodal, num_parameters, build_s ...).

    Returns:
        ``out_dir`` as a Path.
    """
    import torch
    import transformers
    from transformers import GenerationConfig

    entry = zoo_entry(name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MARKER_FILE).unlink(missing_ok=True)
    started = time.perf_counter()

    config, processor, model_class = _RECIPES[name]()
    tokenizer = getattr(processor, "tokenizer", processor)
    # A private RNG state: building never disturbs the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = model_class(config).eval()
    eos = tokenizer.eos_token_id
    # An encoder-decoder's generation starts from its decoder_start_token_id (and BART
    # forces bos first), as the hub checkpoints' generation_config.json say.
    seq2seq = dict(decoder_start_token_id=config.decoder_start_token_id,
                   forced_bos_token_id=tokenizer.bos_token_id) if config.is_encoder_decoder else {}
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=_generation_eos(name, tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        **seq2seq,
    )
    model.save_pretrained(out_dir, safe_serialization=True)
    processor.save_pretrained(out_dir)

    architecture = type(model).__name__
    if architecture != entry.architecture:  # a recipe and its entry disagree
        raise RuntimeError(f"{name}: built {architecture}, expected {entry.architecture}")
    files = sorted(p.name for p in out_dir.iterdir() if p.is_file())
    marker = {
        "name": name,
        "architecture": architecture,
        "multimodal": entry.multimodal,
        "mrope": entry.mrope,
        "model_type": config.model_type,
        "num_parameters": int(sum(p.numel() for p in model.parameters())),
        "vocab_size": len(tokenizer),
        "eos_token_id": eos,
        "seed": SEED,
        "zoo_version": ZOO_VERSION,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "files": files + [MARKER_FILE],
        "build_s": round(time.perf_counter() - started, 3),
    }
    (out_dir / MARKER_FILE).write_text(json.dumps(marker, indent=2, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
    return out_dir


def _generation_eos(name: str, tokenizer):
    """eos ids for generation: the turn end, plus what the real generation configs add."""
    extra = {"gemma3": ["<end_of_turn>"], "llama": ["<|end_of_text|>", "<|eom_id|>"],
             "qwen2_vl": ["<|endoftext|>"], "qwen2_5_vl": ["<|endoftext|>"], "qwen3_vl": ["<|endoftext|>"],
             "qwen3": ["<|endoftext|>"], "qwen3_moe": ["<|endoftext|>"], "idefics3": ["<|im_end|>"],
             "gemma2": ["<end_of_turn>"], "gpt_oss": ["<|endoftext|>", "<|call|>"],
             "mllama": ["<|end_of_text|>", "<|eom_id|>"]}
    ids = [tokenizer.eos_token_id]
    for token in extra.get(name, []):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id is not None and token_id not in ids:
            ids.append(token_id)
    return ids if len(ids) > 1 else ids[0]


def is_complete(folder: os.PathLike) -> bool:
    """Whether ``folder`` holds a finished zoo checkpoint (its marker exists)."""
    return (Path(folder) / MARKER_FILE).is_file()


def build_zoo(root: os.PathLike, names: Iterable[str] = ZOO_NAMES) -> dict[str, Path]:
    """Build each entry into ``root/<name>``, skipping folders already complete.

    A folder without the marker (an interrupted build) is rebuilt from scratch.

    Returns:
        ``{name: folder}`` in the order of ``names``.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    built: dict[str, Path] = {}
    for name in names:
        zoo_entry(name)  # fail early on an unknown name
        folder = root / name
        if not is_complete(folder):
            if folder.exists():
                shutil.rmtree(folder)
            build_checkpoint(name, folder)
        built[name] = folder
    return built


def mixed_dataset(folder: os.PathLike) -> Path:
    """A training set of two records from the bundled smoke set, one with an image and one
    without: with 2 ranks and one row each, every step gives one rank a text-only batch."""
    from hyport_lib.train.smoke_data import write_smoke_dataset

    smoke = write_smoke_dataset(folder)
    records = {r["id"]: r for r in json.loads(smoke.read_text(encoding="utf-8"))}
    path = Path(folder) / "mixed.json"
    path.write_text(json.dumps([records["smoke-single-0"], records["smoke-text-0"]]), encoding="utf-8")
    return path


def read_marker(folder: os.PathLike) -> dict:
    """The ``zoo.json`` written when ``folder`` was built."""
    return json.loads((Path(folder) / MARKER_FILE).read_text(encoding="utf-8"))


__all__ = [
    "MARKER_FILE",
    "ZOO_NAMES",
    "ZooEntry",
    "build_checkpoint",
    "build_zoo",
    "is_complete",
    "load_processor",
    "mixed_dataset",
    "read_marker",
    "sample_image",
    "zoo_entry",
]
