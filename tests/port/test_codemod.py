"""The Python rewrite of ``hyport port`` (:mod:`hyport_lib.port.codemod`) on planted code:
what changes, into what, and what is left for a human and why."""

from __future__ import annotations

import ast
import json

import pytest

from hyport_lib.port.codemod import port_python
from hyport_lib.port.tree import JSON_NAME, port_tree

PLANTED = '''\
"""A CUDA model file (planted)."""
import torch
import torch.distributed as dist
from flash_attn import flash_attn_func  # the kernel
from flash_attn.bert_padding import pad_input, unpad_input


class Attention(torch.nn.Module):
    def forward(self, q, k, v):
        assert q.is_cuda
        out = flash_attn_func(q, k, v, causal=True)
        return out


def setup(model, rank):
    dist.init_process_group(backend="nccl")
    if dist.get_backend() == "nccl":
        torch.cuda.synchronize()
    model = model.cuda(rank)
    x = torch.zeros(2, device="cuda")
    y = torch.zeros(2, device=f"cuda:{rank}")
    ready = x.is_cuda
    cap = torch.cuda.get_device_capability(0)
    return model, x, y, ready, cap


def load(name):
    from transformers import AutoModel
    return AutoModel.from_pretrained(name, attn_implementation="flash_attention_2")
'''

UNPORTABLE = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


@torch.jit.script
def scripted(x):
    if x.is_cuda:
        return x.cuda()
    return x


g = torch.cuda.CUDAGraph()
'''


def test_planted_file_is_rewritten_kind_by_kind():
    result = port_python(PLANTED, "model.py", relative=False)
    code = result.code
    kinds = {(c.line, c.kind) for c in result.changes}
    assert (4, "flash_attn_import") in kinds and (5, "flash_attn_import") in kinds
    # LibCST's AddImportsVisitor adds the helpers to the rewritten import; the comment stays
    assert "on_accelerator, flash_attn_func  # the kernel\n" in code
    assert "from flash_attn_ascend import pad_input, unpad_input" in code
    assert (10, "is_cuda_guard") in kinds and "assert flash_supported(q)" in code
    assert (22, "is_cuda") in kinds and "ready = on_accelerator(x)" in code
    assert 'init_process_group(backend=distributed_backend())' in code
    assert "if dist.get_backend() == distributed_backend():" in code
    assert "accelerator_module().synchronize()" in code
    assert "model = model.to(accelerator_device(rank))" in code
    assert 'torch.zeros(2, device=accelerator_type())' in code
    assert 'torch.zeros(2, device=accelerator_device(rank))' in code
    assert 'attn_implementation=hf_attn_implementation()' in code
    assert "import flash_attn\n" not in code and "from flash_attn " not in code
    # the helpers are imported once, by name, from the generated module
    assert "from flash_attn_ascend import accelerator_device, accelerator_module" in code
    assert code.count("accelerator_device, accelerator_module") == 1
    assert [m.kind for m in result.manual] == ["torch_cuda"] and result.manual[0].line == 23
    assert "returns None" in result.manual[0].why
    compile(code, "model.py", "exec")


def test_relative_import_for_package_code():
    result = port_python("from .configuration import C\nfrom flash_attn import flash_attn_func\n",
                         "m.py", relative=True)
    assert "from .flash_attn_ascend import flash_attn_func" in result.code


def test_unserved_flash_names_are_left_whole_and_listed():
    source = "from flash_attn.ops.rms_norm import rms_norm\nfrom flash_attn import flash_attn_func, foo\n"
    result = port_python(source, "m.py", relative=False)
    assert result.code is None  # never half-rewritten
    assert [(m.line, m.kind) for m in result.manual] == [(1, "flash_attn_unserved"),
                                                         (2, "flash_attn_unserved")]
    assert "foo" in result.manual[1].why


def test_triton_jit_script_and_cuda_graphs_are_listed_not_rewritten(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "kernels.py").write_text(UNPORTABLE)
    result = port_tree(src, tmp_path / "dst")
    spots = {(m.file, m.line, m.kind) for m in result.manual}
    assert ("kernels.py", 2, "triton") in spots and ("kernels.py", 3, "triton") in spots
    assert ("kernels.py", 7, "triton_kernel") in spots
    assert ("kernels.py", 12, "jit_script") in spots
    # inside the scripted function nothing changes; each spot is named for a human
    assert ("kernels.py", 13, "is_cuda") in spots and ("kernels.py", 14, "cuda_call") in spots
    assert ("kernels.py", 18, "torch_cuda") in spots
    assert result.changes == []
    assert (tmp_path / "dst" / "kernels.py").read_text() == UNPORTABLE
    record = json.loads((tmp_path / "dst" / JSON_NAME).read_text())
    assert {m["line"] for m in record["manual"]} >= {2, 3, 7, 12, 13, 14, 18}


# --------------------------------------------------------------------------- review findings
@pytest.mark.parametrize("code", [
    "y = 1 .cuda()\n",
    "import torch\n\ndef f(m):\n    return (m\n            .cuda(0))\n",
    "import torch\n\ndef f(m):\n    y = (torch.zeros(3)  # kept\n         .cuda())\n    return y\n",
])
def test_a_cuda_call_keeps_its_parentheses_and_the_space_before_its_dot(code):
    ported = port_python(code, "m.py", relative=False).code
    ast.parse(ported)
    assert ".to(accelerator_device(" in ported and ("#" not in code or "# kept" in ported)


def test_is_cuda_as_a_target_is_left_alone():
    source = "class T:\n    def __init__(self):\n        self.is_cuda = True\n        self.x: bool = self.is_cuda\n"
    result = port_python(source, "m.py", relative=False)
    assert "self.is_cuda = True" in result.code and "self.x: bool = on_accelerator(self)" in result.code
    compile(result.code, "m.py", "exec")


@pytest.mark.parametrize("source", [
    'TIMEOUTS = {"nccl": 600, "gloo": 60}\n',
    '"""nccl"""\n',
    "msg = 'nccl' ' backend'\n",
    "match b:\n    case 'nccl':\n        pass\n",
])
def test_nccl_where_a_call_cannot_go_is_not_rewritten(source):
    result = port_python(source, "m.py", relative=False)
    assert result.code is None and result.changes == []


def test_nccl_in_arguments_comparisons_and_assignments():
    source = ('backend = "nccl"\nok = backend == "nccl"\nno = "nccl" != backend\n'
              'dist.init_process_group("nccl")\n')
    result = port_python(source, "m.py", relative=False)
    assert [c.line for c in result.changes] == [1, 2, 3, 4]
    assert result.code.count("distributed_backend()") == 4
    assert result.code.startswith("from flash_attn_ascend import distributed_backend\n")


def test_torch_aliases_and_classes():
    source = ("import torch as th\nfrom torch import cuda\nth.cuda.synchronize()\ncuda.empty_cache()\n"
              "y = torch.Tensor.cuda(x)\nd = f'cuda:0{s}'\nto(x, f'cuda:0{s}')\nmod = th.cuda\n")
    result = port_python(source, "m.py", relative=False)
    assert "accelerator_module().synchronize()" in result.code
    assert "accelerator_module().empty_cache()" in result.code
    assert "torch.Tensor.cuda(x)" in result.code and "to(x, f'cuda:0{s}')" in result.code
    assert [(m.line, m.kind) for m in result.manual] == [(8, "torch_cuda")]


def test_the_port_rewrites_from_the_scans_table_and_the_scan_names_what_it_writes(tmp_path):
    """One table of CUDA-only constructs: each line the port rewrites in the planted file
    is a scan finding whose suggestion says what the port writes there, and every name
    the table lets the port import is one the generated module serves."""
    from hyport_lib.port.generated import flash_attn_ascend
    from hyport_lib.scan import rules
    from hyport_lib.scan.scanner import scan_path

    (tmp_path / "planted.py").write_text(PLANTED)
    result = port_python(PLANTED, "planted.py", relative=False)
    suggestions: dict[int, list[str]] = {}
    assert result.changes
    for hit in scan_path(tmp_path).hits:
        suggestions.setdefault(hit.line, []).append(hit.suggestion)
    for change in result.changes:
        said = " | ".join(suggestions.get(change.line, []))
        assert "hyport port" in said, (change, said)
        if change.kind in rules.PORT_WRITES:
            assert rules.PORT_WRITES[change.kind] in said, (change, said)
    assert {c.kind for c in result.changes} - {"flash_attn_import", "torch_cuda"} <= set(rules.PORT_WRITES)
    left = {m.line: m.why for m in result.manual}
    capability = PLANTED.splitlines().index("    cap = torch.cuda.get_device_capability(0)") + 1
    assert left[capability] == rules.CUDA_NAMES_BY_HAND["get_device_capability"]
    assert rules.CUDA_NAMES_BY_HAND["get_device_capability"] in " ".join(suggestions[capability])
    served = rules.SERVED_FLASH_NAMES | {"accelerator_device", "accelerator_type", "accelerator_module",
                                         "distributed_backend", "on_accelerator", "flash_supported",
                                         "hf_attn_implementation"}
    assert all(callable(getattr(flash_attn_ascend, name, None)) for name in served), \
        sorted(n for n in served if not hasattr(flash_attn_ascend, n))
