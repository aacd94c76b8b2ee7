"""hyport's attention backends, bound to the one flash-attn implementation
(:mod:`hyport_lib.port.generated.flash_attn_ascend`, the file ``hyport port`` writes into
ported trees). ``FlashAttnAPI(backend)`` binds its flash-attn functions to one of them:

* ``npu``: ``torch_npu.npu_fusion_attention`` (NFA);
* ``npu-emulated``: the same argument conversion, executed by hyport's CPU emulation
  of the NFA contract, so that the NPU mapping can be checked on any host;
* ``sdpa`` (also ``cpu`` / ``cuda``): ``torch.nn.functional.scaled_dot_product_attention``;
* ``auto``: ``npu`` when the backend seam finds an NPU, else ``sdpa``.
"""

from __future__ import annotations

from hyport_lib.backend import get_backend, import_torch_npu
# The module, not its function: tests count the emulated calls by patching the module.
from hyport_lib.npu_attention import emulation
from hyport_lib.port.generated.flash_attn_ascend import FlashAttention

BACKEND_CHOICES = ("auto", "npu", "npu-emulated", "sdpa", "cpu", "cuda")


class FlashAttnAPI(FlashAttention):
    """flash-attn's functions on one of hyport's backends (``backend``: resolved, ``npu``,
    ``npu-emulated`` or ``sdpa``). ``calls`` counts the attention calls served per path: a
    "ported" model whose forward adds none never reached the swapped attention (remote code
    that runs its flash path only ``if q.is_cuda``), which the model-level check reports."""

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
