"""Scan suggestions are read by the owner of the scanned code: they name what that code can
write (the module the port writes, plain torch / torch_npu), never hyport's internals."""

from __future__ import annotations

import re
from pathlib import Path

from hyport_lib.scan import ast_tests, rules
from hyport_lib.scan.scanner import scan_path

TREE = Path(__file__).resolve().parents[1] / "data" / "scan_tree"
#: hyport's own modules and objects, which a user's code does not have (``distributed_backend()``
#: is the generated module's and stays allowed: ``\b`` does not split ``_backend``).
INTERNALS = re.compile(r"hyport_lib\.|\bbackend\.|\bget_backend\(|install_flash_attn_shim|"
                       r"register_hyport_attention")


def _strings(value) -> list[str]:
    """Every string held by a table value: dict values, tuple and list items, recursively."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (tuple, list, frozenset, set)):
        return [s for v in value for s in _strings(v)]
    return []


def _every_suggestion() -> list[str]:
    texts = [s for name, value in vars(rules).items() if not name.startswith("__")
             for s in _strings(value)]
    texts += [ast_tests.STOPS, ast_tests.FALLS_BACK]
    texts += [rules.suggestion_for(name) for name in rules.SUGGESTIONS]
    texts += [rules.suggestion_for(f"torch.cuda.{name}")
              for name in rules.SERVED_CUDA_NAMES | set(rules.CUDA_NAMES_BY_HAND)]
    texts += [rules.package_suggestion(name) or "" for name in
              ("flash-attn", "apex", "xformers", "triton", "bitsandbytes", "pynvml", "nvidia-cublas-cu12")]
    texts += [hit.suggestion for hit in scan_path(TREE).hits]
    return texts


def test_no_suggestion_names_hyport_internals():
    texts = _every_suggestion()
    assert len(texts) > 100
    wrong = sorted({t for t in texts if INTERNALS.search(t)})
    assert wrong == []
    # the guard is real: the texts the scan printed before this rule are caught
    assert INTERNALS.search("go through hyport_lib.backend.get_backend()")
    assert INTERNALS.search("backend.synchronize()")
    assert not INTERNALS.search("hyport port writes distributed_backend() (from flash_attn_ascend)")


def test_every_suggestion_for_a_rewritten_construct_names_what_the_port_writes():
    by_kind = {
        "cuda_call": [rules.CUDA_METHOD_SUGGESTION],
        "cuda_device": [rules.DEVICE_CONTEXT_SUGGESTIONS["to"], rules.DEVICE_CONTEXT_SUGGESTIONS["device"]],
        "nccl": [rules.NCCL_SUGGESTION],
        "is_cuda": [rules.ATTRIBUTE_RULES[rules.IS_CUDA_RE][1]],
        "is_cuda_guard": [ast_tests.STOPS, ast_tests.FALLS_BACK],
        "attn_implementation": [rules.FLASH_IMPL_SUGGESTION],
    }
    assert set(by_kind) == set(rules.PORT_WRITES)
    for kind, texts in by_kind.items():
        for text in texts:
            assert text.endswith(rules.port_writes(kind)), (kind, text)
    for name in rules.SERVED_CUDA_NAMES:
        text = rules.suggestion_for(f"torch.cuda.{name}")
        assert text.endswith(f"hyport port writes accelerator_module().{name} (from flash_attn_ascend)"), text
    for module in rules.SERVED_FLASH_MODULES:
        for name in ("flash_attn_func", "unpad_input", "apply_rotary_emb"):
            text = rules.suggestion_for(f"{module}.{name}")
            assert text.endswith("hyport port imports it from flash_attn_ascend"), text


def test_code_written_as_the_suggestions_say_is_not_flagged(tmp_path):
    """``accelerator_type() == "cuda"`` is the guard the suggestions ask for: code behind it,
    and the comparison itself, are no findings; ``.to(accelerator_device(i))`` is none."""
    (tmp_path / "advised.py").write_text(
        "import torch\n"
        "from flash_attn_ascend import accelerator_device, accelerator_type\n"
        "if accelerator_type() == 'cuda':\n"
        "    torch.backends.cuda.matmul.allow_tf32 = True\n"
        "    torch.cuda.nvtx.range_push('step')\n"
        "x = x.to(accelerator_device(0))\n"
        "if flash_attn_ascend.accelerator_type() != 'cuda':\n"
        "    pass\n"
        "if helper() == 'cuda':\n"
        "    pass\n")
    found = scan_path(tmp_path)
    # a call of any other function compared with "cuda" is still a hard-coded device
    assert [(h.line, h.category) for h in found.hits] == [(9, "cuda_device")]
