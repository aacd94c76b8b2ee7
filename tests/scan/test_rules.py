"""The one table of CUDA-only constructs (:mod:`hyport_lib.scan.rules`), read by the scan and
the port alike. Its suggestions are read by the owner of the scanned code: they name what
that code can write (the module the port writes, plain torch / torch_npu), never hyport's
internals, and what the port writes or why it leaves the construct."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hyport_lib.port import segments
from hyport_lib.port.codemod import port_python
from hyport_lib.port.tree import port_requirements
from hyport_lib.scan import ast_tests, rules
from hyport_lib.scan.dependencies import scan_requirements_txt
from hyport_lib.scan.python_code import scan_python
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
        "is_cuda": [rules.name_rule("is_cuda", attribute=True).suggestion],
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


#: An ``is_cuda`` test that decides whether flash attention runs.
GUARDED_ATTENTION = ("from flash_attn import flash_attn_func\n"
                     "class Attention:\n"
                     "    def forward(self, x):\n"
                     "        return flash_attn_func(x, x, x) if x.is_cuda else self.eager(x)\n")
#: The generated module's helpers a suggestion may name.
HELPERS = re.compile(r"\b(accelerator_(?:device|type|module)|distributed_backend|on_accelerator|"
                     r"flash_supported|hf_attn_implementation)\(")
#: One snippet per construct of the table that the port rewrites (the construct on the last
#: line; ``i`` for an index, as the suggestions write it).
REWRITTEN = [
    *[f"import torch\ntorch.cuda.{name}\n" for name in sorted(rules.SERVED_CUDA_NAMES)],
    "x.cuda(i)\n", "x.to('cuda')\n", "x.to(f'cuda:{i}')\n", "y = f(x, device='cuda')\n",
    "dist.init_process_group('nccl')\n", "same = backend == 'nccl'\n", "ok = x.is_cuda\n",
    GUARDED_ATTENTION, "m = M.from_pretrained(p, attn_implementation='flash_attention_2')\n",
]
#: ``torch.cuda`` constructs the port leaves for a human: its table, a name it does not
#: know, and a name imported from torch.cuda.
LEFT = [*[f"import torch\ntorch.cuda.{name}\n" for name in sorted(rules.CUDA_NAMES_BY_HAND)],
        "import torch\ntorch.cuda.memory_stats\n", "from torch.cuda import current_device\n",
        "import torch\nfrom torch.cuda.amp import autocast\n", "from torch.cuda.memory import x\n"]


def _port_and_scan(code: str) -> tuple:
    """What the port does with ``code`` (its rewrite, in this process) and the scan's
    suggestions for its last line."""
    done = port_python(code, "snippet.py", relative=False)
    hits, error = scan_python(code.encode(), "snippet.py")
    assert error is None
    last = code.count("\n")
    return done, [h.suggestion for h in hits if h.line == last]


def test_the_suggestion_names_the_very_code_the_port_writes():
    kinds = set()
    for code in REWRITTEN:
        done, said = _port_and_scan(code)
        changes = [c for c in done.changes if c.line == code.count("\n")]
        assert changes and said, code
        for change in changes:
            kinds.add(change.kind)
            written = re.sub(r"^\w+=", "", change.after)  # an argument's value, not its keyword
            writes = [s.split("hyport port writes ", 1)[1] for s in said if "hyport port writes " in s]
            assert any(written in w for w in writes), (code, change.after, said)
        # no other helper is suggested than the port writes: a device where an int is
        # returned (torch.cuda.current_device) would contradict the port
        for text in said:
            before, _, writes = text.partition("hyport port writes ")
            assert set(HELPERS.findall(before)) <= set(HELPERS.findall(writes)), (code, text)
    assert kinds == set(rules.PORT_WRITES) | {"torch_cuda"}
    for module in rules.SERVED_FLASH_MODULES:
        for name in sorted(rules.SERVED_FLASH_NAMES):
            done, said = _port_and_scan(f"from {module} import {name}\n")
            assert [c.after for c in done.changes] == [f"from {rules.GENERATED_MODULE} import {name}"]
            assert [s for s in said if s.endswith("hyport port imports it from flash_attn_ascend")], said


def test_a_construct_the_port_leaves_is_suggested_with_the_ports_hand_fix():
    for code in LEFT:
        done, said = _port_and_scan(code)
        [spot] = done.manual  # one note: `from torch.cuda import x` is not also "torch.cuda as a module"
        assert spot.snippet == code.splitlines()[-1], (code, done.manual)
        assert not done.changes and len(said) == 1, (code, said)
        assert said[0].endswith(f"hyport port leaves it: {spot.why}"), (code, said)
        assert "hyport port writes" not in said[0] and "same calls" not in said[0], said
    _, [said] = _port_and_scan("import torch\ntorch.cuda.get_device_capability\n")
    assert said == ("hyport port leaves it: torch.npu.get_device_capability() returns None on "
                    "torch_npu: a test of the compute capability must be rewritten by hand")


#: Each way a requirement names a flash-attn package (``{}``: its name).
REQUIREMENT_FORMS = ("{}==2.5.8", "{}[test] >=2 ; sys_platform == 'linux'", "{} --no-build-isolation")


@pytest.mark.parametrize("name", rules.FLASH_ATTN_PACKAGES)
def test_each_flash_attn_package_is_flagged_by_the_scan_and_removed_by_the_port(name):
    for form in REQUIREMENT_FORMS:
        line = form.format(name) + "\n"
        [hit] = scan_requirements_txt(line, "requirements.txt")
        assert hit.suggestion.startswith("remove: flash_attn_ascend"), (line, hit)
        new, changes = port_requirements(line, "requirements.txt")
        assert len(changes) == 1 and new.startswith(f"# {line.strip()}  (removed by hyport port"), line


def test_the_flash_attention_repository_is_flagged_and_removed_at_any_tag():
    for line in ("git+https://github.com/Dao-AILab/flash-attention.git@v2.5.8\n",
                 "git+https://github.com/Dao-AILab/flash-attention.git\n"):
        assert len(scan_requirements_txt(line, "requirements.txt")) == 1, line
        assert len(port_requirements(line, "requirements.txt")[1]) == 1, line


def test_a_new_rule_is_one_line_of_the_table_and_both_walkers_see_it(monkeypatch):
    """The scan and the port match constructs with the table's own matchers: a rule added
    to ``rules`` alone is a scan finding and a port rewrite."""
    rule = rules.Rule(rules.CUDA_DEVICE, "said by the new rule", rules.Port("on_cuda", "on_accelerator"))
    monkeypatch.setitem(rules.ATTRIBUTE_RULES, re.compile(r"^on_cuda$"), rule)
    code = "ok = x.on_cuda\n"
    done, said = _port_and_scan(code)
    assert said == ["said by the new rule"]
    assert [(c.kind, c.after) for c in done.changes] == [("on_cuda", "on_accelerator(x)")]


def test_every_module_the_port_leaves_is_one_the_scan_flags_and_the_port_reads():
    assert rules.UNPORTABLE_MODULES
    for module, why in rules.UNPORTABLE_MODULES.items():
        assert rules.category_for(module) is not None, module
        assert module in segments.TRIGGER_WORDS, module
        done, said = _port_and_scan(f"import {module}\n")
        assert [m.why for m in done.manual] == [why] and said[0].endswith(f"hyport port leaves it: {why}")


def test_a_flash_attn_archive_by_file_name_or_an_editable_repository_is_flagged_and_removed():
    """The port reads a requirement line as the scan does (``requirement_name``), so they
    agree on every spelling, a bare wheel file name included."""
    for line in ("flash_attn-2.5.8-cp310-cp310-linux_x86_64.whl\n", "./wheels/flash_attn-2.5.8.tar.gz\n",
                 "-e git+https://github.com/Dao-AILab/flash-attention.git@v2.5.8\n", "flash-attn==\n"):
        assert len(scan_requirements_txt(line, "requirements.txt")) == 1, line
        assert len(port_requirements(line, "requirements.txt")[1]) == 1, line
    for line in ("-r flash-attn.txt\n", "-f https://github.com/Dao-AILab/flash-attention/releases\n",
                 "flash-attn-cuda==1\n"):
        assert port_requirements(line, "requirements.txt") == (None, []), line
