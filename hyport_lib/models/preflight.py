"""Is ``model_path`` a model hyport can load? Checked before any process starts
(:func:`check_model_path`), so that a typo never becomes a hub download attempt in every
worker and a broken checkpoint is named with its file, not a traceback per card.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from hyport_lib.checkpoint_files.header import read_header
from hyport_lib.models.families import is_encoder_decoder, read_config
from hyport_lib.models.model_cache import SMOLLM2_NAME, PretrainedUnavailable, ensure_smollm2
from hyport_lib.models.tiny import TINY_MODEL_NAME, ensure_tiny_model
from hyport_lib.utils.wording import counted, plural

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


class ModelPathError(ValueError):
    """``model_path`` cannot be loaded; the message names the parameter, path and reason."""


def check_model_path(model_path: str, *, param: str = "model_path", allow_download: bool = False,
                     local_only: str = "") -> str:
    """The folder to load (absolute), or ``model_path`` itself for a hub id when
    ``allow_download`` (offline otherwise). ``local_only``: who loads local folders only
    (e.g. ``"stage 02"``), said when a hub id is refused. Checks, cheapest first: the
    folder, ``config.json``, the weights and each safetensors header. Raises PermissionError
    when the cache (``HYPORT_CACHE``) the tiny model or SmolLM2 is built in cannot be written.
    """
    text = str(model_path or "").strip()
    if not text:
        raise ModelPathError(f"{param}: empty; give a model folder or 'tiny'")
    if text == TINY_MODEL_NAME:
        return str(ensure_tiny_model())
    if text == SMOLLM2_NAME:  # converted once from the installed wheel into the cache
        try:
            return str(ensure_smollm2())
        except PretrainedUnavailable as exc:
            raise ModelPathError(str(exc)) from None
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    if not path.exists():
        if allow_download and not local_only and HUB_ID.match(text):
            return text
        if local_only and HUB_ID.match(text):
            hint = (f" (it looks like a hub id: {local_only} loads local folders only; download "
                    f"the model first, e.g. huggingface-cli download {text} --local-dir <folder>)")
        else:
            hint = (" (it looks like a hub id: downloads are off; download the model first, or "
                    "allow downloads: allow_download=True, hyport infer --allow-download)"
                    if HUB_ID.match(text) else "")
        raise ModelPathError(f"{param}={text!r}: no such folder ({path.resolve()}){hint}")
    if not path.is_dir():
        raise ModelPathError(f"{param}={text!r}: {path.resolve()} is a file, not a model folder")
    _check_config(path, param, text)
    _check_weights(path, param, text)
    # Absolute, but through the user's own links: the path they gave is the one loaded.
    return os.path.normpath(str(path.absolute()))


def check_decoder_only(model_path: str, stage: str) -> None:
    """ValueError in one line for a local folder whose config says encoder-decoder, named
    before ``stage`` loads anything: hyport's loaders, prompts and training rows are a
    decoder's (a causal-LM class would load the decoder alone and drop the encoder)."""
    if not Path(model_path).is_dir():
        return  # a hub id: the loader's own check (describe_config) names it
    data = read_config(model_path)
    if is_encoder_decoder(data):
        raise ValueError(f"{model_path}: {data.get('model_type') or 'the model'} is an encoder-decoder model; "
                         f"encoder-decoder models are not supported by {stage} yet")


def _check_config(path: Path, param: str, text: str) -> None:
    config = path / "config.json"
    if not config.is_file():
        raise ModelPathError(f"{param}={text!r}: not a model folder: no config.json in {path.resolve()}")
    try:
        data = read_config(path)
    except json.JSONDecodeError as exc:
        raise ModelPathError(f"{param}={text!r}: {config.resolve()} is not valid JSON (line "
                             f"{exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelPathError(f"{param}={text!r}: cannot read {config.resolve()} ({exc})") from None
    if not isinstance(data, dict):
        raise ModelPathError(f"{param}={text!r}: {config.resolve()} holds a JSON "
                             f"{type(data).__name__}, not an object")
    # Remote code names its config class in auto_map instead (AutoConfig then needs no model_type).
    if (not isinstance(data.get("model_type"), str) or not data["model_type"]) and "auto_map" not in data:
        raise ModelPathError(f"{param}={text!r}: {config.resolve()} names no model_type "
                             f"(transformers cannot tell which model class to build)")


def _check_weights(path: Path, param: str, text: str) -> None:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}
        except (OSError, json.JSONDecodeError, AttributeError) as exc:
            raise ModelPathError(f"{param}={text!r}: {index.resolve()} is not a readable index "
                                 f"({exc})") from None
        shards = sorted({path / name for name in weight_map.values()})
        missing = [s.name for s in shards if not s.is_file()]
        if missing:
            raise ModelPathError(f"{param}={text!r}: {index.name} names {counted(len(missing), 'shard')} that "
                                 f"{plural('is', len(missing), 'are')} not there: {', '.join(missing)}")
    else:
        shards = sorted(path.glob("*.safetensors"))
    if not shards and not any(path.glob("pytorch_model*.bin")):
        raise ModelPathError(f"{param}={text!r}: no weights in {path.resolve()} (no *.safetensors, "
                             "no pytorch_model*.bin)")
    for shard in shards:
        if not shard.is_file():
            raise ModelPathError(f"{param}={text!r}: {shard} is not a regular file (a folder, "
                                 "pipe or device where the weights should be)")
        header = read_header(shard, validate=False)
        errors = [f for f in header.findings if f.severity == "error"]
        if errors:
            raise ModelPathError(f"{param}={text!r}: bad safetensors file {shard.resolve()}: "
                                 f"{errors[0].message}")
