"""The proof of a port (proof/port.py), on the generated module's functions alone: hyport's
own module passes against the flash-attn reference, a wrong mapping fails naming the call."""

from __future__ import annotations

from hyport_lib.npu_attention import emulation
from hyport_lib.port.generated import flash_attn_ascend as generated
from hyport_lib.proof.port import FUNCTIONS, check_functions


def test_the_generated_module_passes_on_the_npu_path_and_a_wrong_output_fails(monkeypatch):
    monkeypatch.setattr(generated, "BACKEND", "npu")
    monkeypatch.setattr(generated, "npu_fusion_attention", emulation.npu_fusion_attention)
    case = check_functions(generated, FUNCTIONS)
    assert (case.name, case.kind, case.verdict) == (FUNCTIONS, "grid", "PASS"), case.detail
    assert case.npu_calls > 0 and 0 <= case.max_abs <= case.bound

    def scaled(*args, **kwargs):  # every output 1.5 times what it should be
        out = emulation.npu_fusion_attention(*args, **kwargs)
        return (out[0] * 1.5, *out[1:])

    monkeypatch.setattr(generated, "npu_fusion_attention", scaled)
    case = check_functions(generated, FUNCTIONS)
    assert case.verdict == "FAIL" and case.detail.startswith("flash_attn_func(")
    assert "max|diff|" in case.detail and case.max_abs > case.bound
