"""flash-attn's API on hyport's backends, over the one flash-attn implementation
(:mod:`hyport_lib.port.generated.flash_attn_ascend`, the file ``hyport port`` writes into
ported trees), and a ``flash_attn`` package made of it, so that unmodified remote model
code (``from flash_attn import flash_attn_varlen_func``) imports on hosts that have none.

What the shim lacks (``flash_attn.ops``, ``RotaryEmbedding`` ...) fails to import, naming
this file. transformers is *not* made to believe FlashAttention-2 is installed (its check
also wants a ``flash-attn`` distribution and a CUDA device); transformers models use
:mod:`~hyport_lib.npu_attention.hf_integration` instead. The shim lives in one process's
``sys.modules``: every process that imports the model code (each torchrun worker, spawned
data-loader workers) must install it before that import.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Optional

from hyport_lib.backend import get_backend, import_torch_npu
# The module, not its function: tests count the emulated calls by patching the module.
from hyport_lib.npu_attention import emulation
from hyport_lib.port.generated import flash_attn_ascend
from hyport_lib.port.generated.flash_attn_ascend import FlashAttention
from hyport_lib.utils.imports import clear_import_caches, legacy_unpad

BACKEND_CHOICES = ("auto", "npu", "npu-emulated", "sdpa", "cpu", "cuda")


class FlashAttnAPI(FlashAttention):
    """flash-attn's functions on one of hyport's backends: ``npu``, ``npu-emulated`` (the NPU
    argument conversion run by hyport's CPU emulation of the op, so it is checked on any host)
    or ``sdpa`` (also ``cpu`` / ``cuda``); ``auto`` is ``npu`` where the backend seam finds one.
    ``calls`` counts the attention calls served per path: a "ported" model whose forward adds
    none never reached the swapped attention (remote code that runs its flash path only ``if
    q.is_cuda``), which the model-level check reports."""

    def __init__(self, backend: str = "auto"):
        name = (backend or "auto").lower().strip()
        if name not in BACKEND_CHOICES:
            raise ValueError(f"backend={backend!r}: expected one of {', '.join(BACKEND_CHOICES)}")
        name = get_backend().kind if name == "auto" else name
        self.backend = "sdpa" if name in ("cpu", "cuda", "sdpa") else name
        super().__init__("sdpa" if self.backend == "sdpa" else "npu")

    def __repr__(self) -> str:
        return f"FlashAttnAPI(backend={self.backend!r})"

    def fusion_attention(self):
        if self.backend == "npu-emulated":
            return emulation.npu_fusion_attention
        torch_npu, error = import_torch_npu()
        if torch_npu is None:
            raise RuntimeError(
                "FlashAttnAPI(backend='npu') needs torch_npu: "
                f"{error or 'not installed'}; use backend='npu-emulated' to run the NPU "
                "argument conversion on CPU, or backend='sdpa'")
        return torch_npu.npu_fusion_attention


# --- the flash_attn shim -----------------------------------------------------------------

DEFAULT_VERSION = "2.7.4.post1"
_API_NAMES = (
    "flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
)
_V1_NAMES = (
    "flash_attn_unpadded_func", "flash_attn_unpadded_qkvpacked_func",
    "flash_attn_unpadded_kvpacked_func",
)

_lock = threading.Lock()
_PADDING_NAMES = ("IndexFirstAxis", "index_first_axis", "IndexPutFirstAxis",
                  "index_put_first_axis", "unpad_input_for_concatenated_sequences", "pad_input")
_ROTARY_NAMES = ("apply_rotary_emb", "apply_rotary_emb_func", "apply_rotary_emb_qkv_",
                 "apply_rotary_emb_kv_")


@dataclass
class ShimInstall:
    """What :func:`install_flash_attn_shim` did, and why (not)."""

    installed: bool
    reason: str
    backend: Optional[str] = None
    version: Optional[str] = None
    modules: tuple[str, ...] = ()
    _replaced: dict = field(default_factory=dict, repr=False)


_current: Optional[ShimInstall] = None


def real_flash_attn_present() -> bool:
    module = sys.modules.get("flash_attn")
    if module is not None:
        return not getattr(module, "__hyport_shim__", False)
    try:
        return importlib.util.find_spec("flash_attn") is not None
    except (ImportError, ValueError):
        return False


def _module(name: str, doc: str, names: dict, is_package: bool) -> types.ModuleType:
    module = types.ModuleType(name, doc)
    spec = importlib.machinery.ModuleSpec(name, loader=None, is_package=is_package)
    spec.has_location = False
    module.__spec__ = spec
    module.__loader__ = None
    module.__package__ = name if is_package else name.rpartition(".")[0]
    # Shown by Python in "cannot import name X from flash_attn (...)": points here.
    module.__file__ = __file__
    if is_package:
        module.__path__ = []
        spec.submodule_search_locations = []
    module.__hyport_shim__ = True
    for key, value in names.items():
        setattr(module, key, value)
    return module


def build_shim_modules(backend: str = "auto", version: str = DEFAULT_VERSION) -> dict:
    api = FlashAttnAPI(backend)
    funcs = {name: getattr(api, name) for name in _API_NAMES}
    v1 = {name: getattr(api, name) for name in _V1_NAMES}
    # __hyport_api__: whoever must know how many calls the shim served (the model check)
    common = {"__version__": version, "__hyport_backend__": api.backend, "__hyport_api__": api,
              "FlashAttnUnsupported": flash_attn_ascend.FlashAttnUnsupported}
    padding_names = {name: getattr(flash_attn_ascend, name) for name in _PADDING_NAMES}
    padding_names["unpad_input"] = make_unpad_input(legacy_unpad(version))
    rotary_names = {name: getattr(flash_attn_ascend, name) for name in _ROTARY_NAMES}
    backend_doc = f"hyport flash-attn shim ({api.backend} backend)"
    mods = {
        "flash_attn.flash_attn_interface": _module(
            "flash_attn.flash_attn_interface", backend_doc, {**common, **funcs, **v1}, False),
        "flash_attn.bert_padding": _module(
            "flash_attn.bert_padding", backend_doc, padding_names, False),
        "flash_attn.layers.rotary": _module(
            "flash_attn.layers.rotary", backend_doc, rotary_names, False),
    }
    mods["flash_attn.layers"] = _module("flash_attn.layers", backend_doc,
                                        {"rotary": mods["flash_attn.layers.rotary"]}, True)
    mods["flash_attn"] = _module("flash_attn", backend_doc, {
        **common, **funcs,
        "flash_attn_interface": mods["flash_attn.flash_attn_interface"],
        "bert_padding": mods["flash_attn.bert_padding"],
        "layers": mods["flash_attn.layers"],
    }, True)
    return mods


def make_unpad_input(legacy: bool):
    """``unpad_input`` as a flash-attn release has it: 4 results before 2.7, else 5."""
    if not legacy:
        return flash_attn_ascend.unpad_input

    def unpad_input(hidden_states, attention_mask):
        return flash_attn_ascend.unpad_input(hidden_states, attention_mask)[:4]

    unpad_input.__doc__ = flash_attn_ascend.unpad_input.__doc__
    return unpad_input


def install_flash_attn_shim(backend: str = "auto", *, force: bool = False,
                            version: str = DEFAULT_VERSION) -> ShimInstall:
    """Put the ``flash_attn`` shim into ``sys.modules`` unless a real flash-attn exists.

    ``force`` installs over a real flash_attn, whose modules are set aside and restored by
    :func:`uninstall_flash_attn_shim`. Below ``version`` 2.7, ``unpad_input`` returns 4
    values (as those releases did) instead of 5. Installing again replaces the previous shim.
    """
    global _current
    with _lock:
        if _current is not None and _current.installed:
            _uninstall_locked()
        if not force and real_flash_attn_present():
            return ShimInstall(False, "a real flash_attn is importable; pass force=True to "
                                      "shadow it")
        mods = build_shim_modules(backend, version)
        replaced = {name: sys.modules[name] for name in list(sys.modules)
                    if name == "flash_attn" or name.startswith("flash_attn.")}
        for name in replaced:
            del sys.modules[name]
        sys.modules.update(mods)
        _forget_import_answers()
        backend_name = mods["flash_attn"].__hyport_backend__
        _current = ShimInstall(True, "forced over a real flash_attn" if replaced else
                               "no real flash_attn on this host", backend_name, version,
                               tuple(sorted(mods)), replaced)
        return _current


def uninstall_flash_attn_shim() -> list[str]:
    """Remove exactly the modules the shim added (returned); restore any real ones it set aside."""
    with _lock:
        return _uninstall_locked()


def _uninstall_locked() -> list[str]:
    global _current
    if _current is None or not _current.installed:
        return []
    removed = []
    for name in _current.modules:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__hyport_shim__", False):
            del sys.modules[name]
            removed.append(name)
    sys.modules.update(_current._replaced)
    _current = None
    _forget_import_answers()
    return removed


def current_shim() -> Optional[ShimInstall]:
    return _current


@contextlib.contextmanager
def callers_shim_kept():
    """Whatever shim the block installs or removes, the caller's (or none) is back after it,
    as it was: a proof that installs its own never leaves the user's notebook without theirs."""
    before = _current
    try:
        yield
    finally:
        uninstall_flash_attn_shim()
        if before is not None and before.installed:
            install_flash_attn_shim(before.backend, version=before.version, force=bool(before._replaced))


def _forget_import_answers() -> None:
    # hyport's try_import caches "is flash_attn importable"; the answer just changed.
    importlib.invalidate_caches()
    clear_import_caches()
