"""What a checkpoint is, read from its config: the one place that knows model families.

Stages never assume LLaVA: :class:`ModelTraits` say whether a model reads images, the auto
class that loads it, whether it takes multimodal rotary positions (M-RoPE: the Qwen-VL
family, HunYuan-VL; packed rows must carry them per sample) and why packing would change
its meaning, where it would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from hyport_lib.models.mask_source import bidirectional_mask
from hyport_lib.utils.bounded_files import read_text

IMAGE_TEXT_TO_TEXT = "AutoModelForImageTextToText"
CAUSAL_LM = "AutoModelForCausalLM"
#: auto_map keys of remote code that mean "a model that reads images".
_REMOTE_MULTIMODAL = ("AutoModelForImageTextToText", "AutoModelForVision2Seq")
#: auto_map keys, in the order hyport loads remote code through them.
_REMOTE_LOADERS = ("AutoModelForImageTextToText", "AutoModelForVision2Seq", "AutoModelForCausalLM", "AutoModel")
#: Config keys that say a model has a vision side whatever class loads it (Phi-3-vision
#: and InternVL2's remote code load through AutoModelForCausalLM).
_VISION_KEYS = ("vision_config", "vision_tower", "img_processor", "mm_vision_tower", "image_token_id",
                "image_token_index")

#: M-RoPE families whose text model reads every row of ``position_ids`` as a rotary axis
#: (no leading row of text positions for the mask): their first axis already holds the
#: plain sequence positions, and packed rows are told apart by the cumulative lengths.
_MROPE_WITHOUT_TEXT_ROW = frozenset({"hunyuan_vl"})

@dataclass(frozen=True)
class ModelTraits:
    """``model_type`` is ``""`` for remote code without one; ``mrope_text_row``: packed
    M-RoPE positions start with a row of per-sample text positions (the Qwen-VL family's
    layout)."""

    model_type: str
    multimodal: bool
    auto_class: str
    mrope: bool = False
    packing_refusal: Optional[str] = None
    remote_code: bool = False
    mrope_text_row: bool = True

    @property
    def kind(self) -> str:
        """``image-text-to-text`` or ``text-only``: how plans and records name it."""
        return "image-text-to-text" if self.multimodal else "text-only"


def describe_config(data: dict) -> ModelTraits:
    """Traits from ``config.json``'s contents (the model's code is read, never imported);
    ValueError for a model type transformers cannot load as a causal or image-text-to-text
    model, without remote code."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    model_type = str(data.get("model_type") or "")
    if is_encoder_decoder(data):
        # transformers maps some (bart, mbart, marian ...) to a causal LM class too: their
        # decoder alone, with the encoder's weights dropped and nothing to cross-attend to.
        raise ValueError(f"model_type={model_type or '?'!r} is an encoder-decoder model (is_encoder_decoder "
                         f"in config.json): hyport loads decoder-only and image-text-to-text models, and "
                         f"a causal-LM class would drop its encoder")
    auto_map = data.get("auto_map") if isinstance(data.get("auto_map"), dict) else {}
    if auto_map:
        loader = next((key for key in _REMOTE_LOADERS if key in auto_map), None)
        if loader is None:
            raise ValueError(f"auto_map names no model class hyport can load ({', '.join(sorted(auto_map))}; "
                             f"expected one of {', '.join(_REMOTE_LOADERS)})")
        multimodal = loader in _REMOTE_MULTIMODAL or any(key in data for key in _VISION_KEYS)
    elif model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        loader, multimodal = IMAGE_TEXT_TO_TEXT, True
    elif model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        loader, multimodal = CAUSAL_LM, False
    else:
        raise ValueError(f"model_type={model_type!r}: transformers has no image-text-to-text or "
                         f"causal language model class for it (and the config has no auto_map for "
                         f"remote code)")
    return ModelTraits(model_type, multimodal, loader, _uses_mrope(data), packing_refusal(data),
                       remote_code=bool(auto_map), mrope_text_row=model_type not in _MROPE_WITHOUT_TEXT_ROW)


def is_encoder_decoder(data: dict) -> bool:
    """Whether config ``data`` says encoder-decoder (at the top level or in its text config);
    a file that leaves the key out means its config class's default (BartConfig's is True)."""
    return any(_says_encoder_decoder(sub) for sub in (data, data.get("text_config")) if isinstance(sub, dict))


def _says_encoder_decoder(section: dict) -> bool:
    from transformers import CONFIG_MAPPING

    if "is_encoder_decoder" in section:
        return section["is_encoder_decoder"] is True
    model_type = section.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return False  # remote code without a transformers class: only the file can say
    try:
        return CONFIG_MAPPING[model_type]().is_encoder_decoder is True
    except Exception:  # noqa: BLE001 — a config class that cannot be built bare: the file said nothing
        return False


def packing_refusal(data: dict) -> Optional[str]:
    """Why packed rows (causal per sample) would change what the model of config ``data``
    computes, or None: its code lets some tokens attend both ways, or it cross-attends."""
    name = str(data.get("model_type") or "the model")
    if any(isinstance(sub, dict) and sub.get("cross_attention_layers")
           for sub in (data, data.get("text_config"))):
        # Cross-attention: Llama-3.2-Vision (mllama; the leak is transformers issue 39379).
        return (f"{name} reads each row's images through cross-attention, and a token that may "
                f"see no image (the prompt before its image, a text-only sample) still attends to "
                f"every image of its row, so packed samples would read each other's images; use "
                f"packing=false")
    where = bidirectional_mask(data)
    if where is None:
        return None
    return (f"{name} attends both ways within some of its tokens ({where}), and packed rows attend "
            f"causally per sample; use packing=false")


#: The most hyport reads of a ``config.json`` (the largest real ones are tens of KiB).
MAX_CONFIG_BYTES = 4 * 2**20


def read_config(model_dir: str | Path) -> dict:
    """``config.json`` of a local checkpoint folder; UnreadableFile for one that is not a
    regular file (a FIFO would block), too large or missing, ValueError for one not JSON."""
    return json.loads(read_text(Path(model_dir) / "config.json", MAX_CONFIG_BYTES, errors="strict"))


def _uses_mrope(value: Any) -> bool:
    return isinstance(value, dict) and (bool(value.get("mrope_section"))
                                        or any(_uses_mrope(v) for v in value.values()))
