"""Which attn_implementation values a device kind can run (npu_attention/runnable.py): auto
first, a reason for each refused name, the one-line refusal naming the fix; the NPU through
the torch_npu double, CUDA through transformers' and hyport's availability checks patched."""

from __future__ import annotations

import pytest

from hyport_lib.npu_attention import runnable
from hyport_lib.npu_attention.hf_integration import register_hyport_attention
from hyport_lib.npu_attention.runnable import attention_choices, attention_options, check_attention
from hyport_lib.params import ParameterError

CPU_CHOICES = ("auto", "eager", "sdpa", "hyport_torch", "hyport_npu_emulated")
FIX_ON_CPU = "use attn_implementation=auto (here: eager), or one of eager, sdpa, hyport_torch, hyport_npu_emulated"


@pytest.fixture
def cuda_host(monkeypatch):
    """A CUDA host as hyport's seam and transformers' own checks see it; ``flash(True)`` also
    installs flash-attn 2.8.3 there."""
    from transformers import utils

    monkeypatch.setattr(runnable, "cuda_available", lambda: True)
    monkeypatch.setattr(runnable, "detect_kind", lambda: "cuda")

    def flash(installed: bool) -> None:
        monkeypatch.setattr(utils, "is_flash_attn_2_available", lambda *a, **k: installed)
        monkeypatch.setattr(runnable, "_installed", lambda d: "2.8.3" if installed and d == "flash-attn" else None)

    flash(False)
    return flash


def test_a_cpu_runs_transformers_plain_attentions_and_hyports_torch_ones():
    assert attention_choices("cpu", work="train") == CPU_CHOICES
    assert attention_choices("auto", work="train") == CPU_CHOICES  # this host has no NPU or GPU
    refused = {o.name: o.why for o in attention_options("cpu", work="train") if not o.runs}
    assert {"hyport_npu_fused", "flash_attention_2", "flash_attention_3", "flex_attention"} <= set(refused)
    assert all(refused.values())
    assert refused["flash_attention_2"] == ("flash-attn is not installed; transformers runs it on CUDA or an "
                                            "Ascend NPU only")
    assert refused["hyport_npu_fused"] == "npu_fusion_attention runs on an Ascend NPU only"
    assert refused["flex_attention"] == "torch's flex_attention has no backward on a CPU, which training needs"


def test_flex_attention_on_a_cpu_is_refused_for_what_each_stage_does_with_it():
    """04 needs a backward; 03's padded batch did not compile (torch 2.13); 05's reload only
    loads the model, so it takes flex_attention."""
    assert attention_choices("cpu") == attention_choices("cpu", work="train") == CPU_CHOICES
    assert attention_choices("cpu", work="load") == (*CPU_CHOICES, "flex_attention")
    check_attention("flex_attention", "cpu", work="load")
    for work, why in (("train", "torch's flex_attention has no backward on a CPU, which training needs"),
                      ("generate", "torch's flex_attention kernel for a CPU failed to compile for the grid's "
                                   "left-padded batch (an inductor C++ compile error, torch 2.13)")):
        with pytest.raises(ParameterError) as refused:
            check_attention("flex_attention", "cpu", work=work)
        assert str(refused.value).startswith(f"attn_implementation='flex_attention': cpu cannot run it ({why}); ")
    assert runnable.attention_offered({"device": "cpu"}) == CPU_CHOICES
    assert runnable.attention_offered_to_train({"device": "cpu"}) == CPU_CHOICES
    assert runnable.attention_offered_to_load({"device": "cpu"}) == (*CPU_CHOICES, "flex_attention")
    with pytest.raises(ValueError, match="^work='infer': expected one of load, generate, train"):
        attention_choices("cpu", work="infer")


def test_an_npu_adds_the_fused_kernel_and_transformers_flash_attention_2(fake_npu):
    assert attention_choices("auto") == (*CPU_CHOICES, "hyport_npu_fused", "flash_attention_2")
    assert attention_choices("npu:3") == attention_choices("auto") == attention_choices("npu", work="train")
    assert attention_choices("cpu", work="train") == CPU_CHOICES  # device="cpu" on an NPU host
    options = {o.name: o for o in attention_options("npu")}
    assert "torch_npu" in options["flash_attention_2"].why
    assert not options["flash_attention_3"].runs and "CUDA (Ampere or newer)" in options["flash_attention_3"].why


def test_an_npu_asked_for_where_torch_npu_is_missing_says_so():
    options = {o.name: o for o in attention_options("npu")}
    assert not options["hyport_npu_fused"].runs and not options["flash_attention_2"].runs
    assert options["flash_attention_2"].why == "no NPU is usable here: torch_npu is not installed"


def test_cuda_runs_flash_attention_2_only_with_flash_attn_installed(cuda_host):
    assert attention_choices("auto", work="train") == (*CPU_CHOICES, "flex_attention")
    options = {o.name: o for o in attention_options("cuda")}
    assert options["flash_attention_2"].why == "flash-attn is not installed (transformers needs it on CUDA)"
    cuda_host(True)
    assert attention_choices("cuda") == (*CPU_CHOICES, "flash_attention_2", "flex_attention")
    assert {o.name: o for o in attention_options("cuda")}["flash_attention_2"].why == "flash-attn 2.8.3"
    with pytest.raises(ParameterError, match="^attn_implementation='hyport_npu_fused': cuda cannot run it"):
        check_attention("hyport_npu_fused", "cuda", work="train")


def test_an_attention_the_device_cannot_run_is_refused_in_one_line_naming_auto():
    with pytest.raises(ParameterError) as refused:
        check_attention("flash_attention_2", "cpu", work="train")
    assert str(refused.value) == ("attn_implementation='flash_attention_2': cpu cannot run it (flash-attn is not "
                                  "installed; transformers runs it on CUDA or an Ascend NPU only); " + FIX_ON_CPU)
    with pytest.raises(ParameterError, match=r"\(here: hyport_npu_fused once it proves itself\), or one of "):
        check_attention("flex_attention", "cpu", work="train", auto_here="hyport_npu_fused once it proves itself")


@pytest.mark.parametrize("name, why", [
    ("flash_attn_2", "not an attention transformers {version} or hyport knows"),
    ("hyport_flash", "not an attention transformers {version} or hyport knows"),
    ("paged|eager", "a paged attention serves transformers' continuous batching (generate_batch), which "
                    "hyport never runs"),
    ("kernels-community/flash-attn", "a hub kernel needs the kernels package, which is not installed"),
], ids=["typo", "hyport-typo", "paged", "hub-kernel"])
def test_a_name_no_worker_could_load_is_refused_the_same_way(name, why):
    import transformers

    with pytest.raises(ParameterError) as refused:
        check_attention(name, "cpu", work="train")
    assert str(refused.value) == f"attn_implementation={name!r}: {why.format(version=transformers.__version__)}; " \
                                 + FIX_ON_CPU


@pytest.mark.parametrize("work", ["load", "generate", "train"])
def test_every_choice_offered_passes_the_check(work):
    offered = attention_choices("cpu", work=work)
    assert offered[:len(CPU_CHOICES)] == CPU_CHOICES
    for name in offered:
        check_attention(name, "cpu", work=work)


def test_a_name_registered_in_this_process_alone_is_refused():
    """A notebook's kernel may register a name of its own; the stages' workers are fresh
    processes that never do, so the plan refuses it as it refuses a typo."""
    register_hyport_attention("sdpa", name="hyport_runnable_test")
    with pytest.raises(ParameterError, match="^attn_implementation='hyport_runnable_test': not an attention "
                                             "transformers"):
        check_attention("hyport_runnable_test", "cpu", work="generate")
    assert "hyport_runnable_test" not in attention_choices("cpu")


def test_a_device_no_stage_takes_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"^device='tpu': expected one of auto, cpu, cuda, npu"):
        attention_choices("tpu")
