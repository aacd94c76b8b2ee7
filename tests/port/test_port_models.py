"""``hyport port`` on real remote code: three models that import flash_attn, vendored
unedited (tests/data/remote_code/*/VENDORED.txt names repository, path, commit and blob).

* Ovis2.5's SigLIP2-NaViT vision tower: packed varlen attention over images and windows;
* InternLM2 (as vendored in InternVL): padded batches through ``unpad_input``, GQA, causal;
* Qwen-7B: flash gated on ``query.is_cuda``, ``torch.cuda`` at import, flash imports in a
  function. Its code was written for transformers 4.32 and calls ``get_head_mask``, which
  transformers 5 removed: it runs in the transformers 4.57 pass of CI.

Each is ported, imported without flash_attn, and proven with the NPU path through the
torch_npu test double (hyport's emulation). A wrong mapping planted in the generated
module (scale, causal, cumulative lengths) must turn the proof into a FAIL.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
import transformers

from hyport_lib.port.tree import port_tree
from hyport_lib.proof.port import prove_port

REMOTE = Path(__file__).parents[1] / "data" / "remote_code"
#: The config fields each model needs beyond its config class's defaults.
MODELS = {
    # windows in block 0, full attention in block 1: both cu_seqlens paths run
    "ovis_siglip2_navit": {"fullatt_block_indexes": "1"},
    # transformers 5 fills rope_scaling in; the real InternLM2 checkpoints set this one
    "internlm2": {"rope_scaling": {"type": "dynamic", "factor": 2.0}},
    "qwen_7b": {},
}
TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5
needs_transformers_4 = pytest.mark.skipif(
    TRANSFORMERS_5, reason="Qwen-7B's code calls PreTrainedModel.get_head_mask (gone in "
                           "transformers 5); runs in CI's transformers 4.57 pass")


def _params(names):
    return [pytest.param(n, marks=needs_transformers_4) if n == "qwen_7b" else n for n in names]


def _blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_vendored_files_are_unedited(name):
    lines = [line.split() for line in (REMOTE / name / "VENDORED.txt").read_text().splitlines()
             if line and not line.startswith("#")]
    assert lines
    for repo, path, commit, blob in lines:
        assert len(commit) == 40 and "/" in repo
        assert _blob_sha1((REMOTE / name / Path(path).name).read_bytes()) == blob, path


@pytest.fixture
def ported(request, tmp_path):
    name = request.param
    result = port_tree(REMOTE / name, tmp_path / name)
    return name, result


def _prove(name, result, **kwargs):
    return prove_port(REMOTE / name, result.dst, config_overrides=MODELS[name], **kwargs)


@pytest.mark.parametrize("ported", _params(sorted(MODELS)), indirect=True)
def test_port_and_proof_pass_with_the_npu_path_through_the_double(ported, fake_npu):
    name, result = ported
    assert result.generated == ["flash_attn_ascend.py"]
    assert any(c.kind == "flash_attn_import" for c in result.changes)
    before = set(sys.modules)
    proof = _prove(name, result)
    assert proof.verdict == "PASS", (proof.error, [(c.name, c.detail) for c in proof.cases])
    assert proof.emulated and "test double" in proof.ported_path
    assert all(case.npu_calls > 0 for case in proof.cases)
    kinds = {case.kind for case in proof.cases}
    assert kinds == ({"image", "packed", "grid"} if name == "ovis_siglip2_navit"
                     else {"dense", "padded", "greedy", "grid"})
    # the port imported without flash_attn, and nothing of either tree stays loaded
    assert "flash_attn" not in sys.modules
    assert not [m for m in set(sys.modules) - before if m.startswith("_hyport_port_")]


@pytest.mark.parametrize("ported", _params(["qwen_7b"]), indirect=True)
def test_is_cuda_gates_are_rewritten_and_fp32_is_explained(ported, fake_npu):
    name, result = ported
    gates = [c for c in result.changes if c.kind == "is_cuda_guard"]
    assert {c.line for c in gates} == {184, 496, 517}
    assert {(m.line, m.kind) for m in result.manual} >= {(39, "torch_cuda"), (95, "flash_attn_unserved")}
    assert any(m.file == "cpp_kernels.py" and m.kind == "cuda_extension" for m in result.manual)
    proof = _prove(name, result)
    assert proof.dtype == "bfloat16" and "float32" in proof.notes[0]


#: A wrong mapping planted in the generated module, the model that must catch it, and
#: whether the model's own forward sees it (else the proof's attention-function grid does).
PLANTED_FAULTS = {
    "scale": ("return 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None",
              "return 1.0 if softmax_scale is None", "ovis_siglip2_navit", True),
    "causal": ("    if causal:\n        right = 0\n", "", "internlm2", True),
    "cumulative lengths": ("actual_seq_qlen=cu_q[1:],", "actual_seq_qlen=cu_q,",
                           "ovis_siglip2_navit", True),
    "top-left causal": ('"sparse_mode": 3}', '"sparse_mode": 2}', "ovis_siglip2_navit", False),
    "window tokens swapped": ('"pre_tockens": NFA_MAX_TOKENS if left is None else left',
                              '"pre_tockens": NFA_MAX_TOKENS if right is None else right',
                              "ovis_siglip2_navit", False),
}


@pytest.mark.parametrize("fault", sorted(PLANTED_FAULTS))
def test_a_planted_wrong_mapping_fails_the_proof(fault, tmp_path, fake_npu):
    right, wrong, name, in_model = PLANTED_FAULTS[fault]
    result = port_tree(REMOTE / name, tmp_path / name)
    module = Path(result.dst) / "flash_attn_ascend.py"
    text = module.read_text()
    assert text.count(right) == 1
    module.write_text(text.replace(right, wrong))
    proof = _prove(name, result)
    assert proof.verdict == "FAIL"
    failed = [case for case in proof.cases if case.verdict == "FAIL"]
    assert any(case.kind == "grid" for case in failed)  # the functions on their own
    model_failed = [case for case in failed if case.kind != "grid"]
    assert bool(model_failed) == in_model
    if fault in ("scale", "causal"):  # caught by the numbers, not by a crash
        assert all("max|diff|" in case.detail or case.tokens_match is False for case in model_failed)


OWN_MODEL = '''\
"""A model of one's own: absolute imports, its config in the same file, no config.json."""
import torch
from flash_attn import flash_attn_func
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput


class OwnConfig(PretrainedConfig):
    model_type = "own"

    def __init__(self, vocab_size=1000, hidden_size=512, num_attention_heads=8, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_attention_heads = num_attention_heads


class OwnForCausalLM(PreTrainedModel):
    config_class = OwnConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.qkv = torch.nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.head = torch.nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, use_cache=False):
        x = self.embed(input_ids)
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.config.num_attention_heads, -1).unbind(2)
        return CausalLMOutput(logits=self.head(flash_attn_func(q, k, v, causal=True).reshape(b, s, -1)))
'''


def test_a_model_of_ones_own_with_absolute_imports(tmp_path, fake_npu):
    src = tmp_path / "src"
    src.mkdir()
    (src / "modeling_own.py").write_text(OWN_MODEL)
    result = port_tree(src, tmp_path / "dst")
    assert "from flash_attn_ascend import flash_attn_func" in (tmp_path / "dst" / "modeling_own.py").read_text()
    proof = prove_port(src, result.dst)
    assert proof.verdict == "PASS", (proof.error, [(c.name, c.detail) for c in proof.cases])
    assert proof.config["hidden_size"] == 64 and all(c.npu_calls > 0 for c in proof.cases)
    assert not [m for m in sys.modules if m in ("modeling_own", "flash_attn_ascend")]  # forgotten


def test_model_code_that_fails_to_build_is_a_fail_with_its_reason(tmp_path, fake_npu):
    src = tmp_path / "src"
    src.mkdir()
    broken = OWN_MODEL.replace("self.post_init()", "self.width = config.missing_field\n        self.post_init()")
    (src / "modeling_own.py").write_text(broken)
    result = port_tree(src, tmp_path / "dst")
    proof = prove_port(src, result.dst, config_overrides={"user_field": 3})
    assert proof.verdict == "FAIL" and proof.cases == []
    assert proof.error.startswith("the tiny model could not be built from your config (AttributeError: ")
    assert "at original modeling_own.py:" in proof.error
    # the command line's flags: the user's own, then the field the failing line reads
    assert proof.error.endswith("set --proof-config to override the config fields the build needs, "
                                "e.g. --proof-config 'user_field=3' "
                                "--proof-config 'missing_field=\"<value>\"'")


#: Remote code written before transformers renamed rope_scaling's "type" to "rope_type":
#: the config below holds what transformers 5 fills in, the model reads the old key.
OWN_ROPE_MODEL = OWN_MODEL.replace(
    "    def __init__(self, vocab_size=1000, hidden_size=512, num_attention_heads=8, **kwargs):\n"
    "        super().__init__(**kwargs)\n",
    "    def __init__(self, vocab_size=1000, hidden_size=512, num_attention_heads=8, rope_scaling=None,\n"
    "                 **kwargs):\n"
    "        super().__init__(**kwargs)\n"
    "        self.rope_scaling = rope_scaling or {'rope_type': 'default', 'rope_theta': 10000.0}\n",
).replace("        self.post_init()",
          "        self.rope_kind = (config.rope_scaling['type'], config.rope_scaling['factor'])\n"
          "        self.post_init()")


def test_a_config_the_tiny_build_cannot_use_names_the_setting_and_the_value_that_fixes_it(
        tmp_path, fake_npu):
    """The issue's ``KeyError: 'type'``: the error names stage 02's port_proof_config with a
    value, and that very value makes the proof pass."""
    import ast

    assert OWN_ROPE_MODEL.count("rope_scaling['type']") == 1
    src = tmp_path / "src"
    src.mkdir()
    (src / "modeling_own.py").write_text(OWN_ROPE_MODEL)
    result = port_tree(src, tmp_path / "dst")
    proof = prove_port(src, result.dst, config_overrides={"user_field": 3},
                       config_setting="port_proof_config")
    assert proof.verdict == "FAIL" and proof.cases == []
    assert proof.error.startswith("the tiny model could not be built from your config (KeyError: 'type' "
                                  "at original modeling_own.py:")
    # the user's own field is kept in the value to set
    assert "; set port_proof_config to override the config fields the build needs, e.g. " \
           "port_proof_config={'user_field': 3, 'rope_scaling': {'type': 'dynamic', 'factor': 2.0}}" \
           in proof.error
    suggested = ast.literal_eval(proof.error.rsplit("port_proof_config=", 1)[1])
    fixed = prove_port(src, result.dst, config_overrides=suggested, config_setting="port_proof_config")
    assert fixed.verdict == "PASS", (fixed.error, [(c.name, c.detail) for c in fixed.cases])
    assert fixed.config["rope_scaling"] == {"type": "dynamic", "factor": 2.0}
    assert fixed.config["user_field"] == 3


@pytest.mark.slow
def test_the_command_on_a_vendored_model(tmp_path, fake_npu):
    import subprocess

    done = subprocess.run([sys.executable, "-m", "hyport_lib", "port", str(REMOTE / "internlm2"),
                           "--out", str(tmp_path / "out"), "--proof", "--proof-config",
                           'rope_scaling={"type": "dynamic", "factor": 2.0}'],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "proof: PASS  InternLM2ForCausalLM" in done.stdout
    assert "test double" in done.stdout and "PASS  attention functions" in done.stdout


#: Wrong ports planted in the ported model file itself (not in the generated module).
PLANTED_IN_MODEL = {
    "padding mask dropped": ("        causal = self.is_causal and query_length != 1\n        if attention_mask is not None:",
                             "        causal = self.is_causal and query_length != 1\n        if False:",
                             "max|diff|"),
    "one layer bypasses the port": (
        "        self.attention = INTERNLM2_ATTENTION_CLASSES[config.attn_implementation](config=config)",
        "        InternLM2DecoderLayer.built = getattr(InternLM2DecoderLayer, 'built', 0) + 1\n"
        "        self.attention = INTERNLM2_ATTENTION_CLASSES['eager' if InternLM2DecoderLayer.built % 2 "
        "else config.attn_implementation](config=config)",
        "part of the model bypasses the port"),
}


@pytest.mark.parametrize("fault", sorted(PLANTED_IN_MODEL))
def test_a_wrong_port_of_the_model_file_fails_the_proof(fault, tmp_path, fake_npu):
    right, wrong, said = PLANTED_IN_MODEL[fault]
    result = port_tree(REMOTE / "internlm2", tmp_path / "internlm2")
    modeling = Path(result.dst) / "modeling_internlm2.py"
    text = modeling.read_text()
    assert text.count(right) == 1
    modeling.write_text(text.replace(right, wrong))
    proof = _prove("internlm2", result)
    assert proof.verdict == "FAIL"
    assert any(said in case.detail for case in proof.cases if case.kind == "padded"
               or said.startswith("part"))


def test_the_proof_leaves_the_callers_modules_and_shim_alone(tmp_path, fake_npu):
    from hyport_lib.npu_attention.flash_api import (current_shim, install_flash_attn_shim,
                                                   uninstall_flash_attn_shim)

    src = tmp_path / "src"
    (src / ".venv" / "site").mkdir(parents=True)
    (src / ".venv" / "site" / "hyport_user_pkg.py").write_text("STATE = []\n")
    (src / "modeling_own.py").write_text(OWN_MODEL)
    sys.path.insert(0, str(src / ".venv" / "site"))
    try:
        import hyport_user_pkg

        hyport_user_pkg.STATE.append(1)
        install_flash_attn_shim("sdpa")
        result = port_tree(src, tmp_path / "dst")
        assert prove_port(src, result.dst).verdict == "PASS"
        assert sys.modules["hyport_user_pkg"] is hyport_user_pkg and hyport_user_pkg.STATE == [1]
        assert current_shim() is not None and current_shim().installed
    finally:
        uninstall_flash_attn_shim()
        sys.path.remove(str(src / ".venv" / "site"))
        sys.modules.pop("hyport_user_pkg", None)


def test_an_import_the_port_left_fails_even_where_flash_attn_imports(tmp_path, fake_npu):
    from hyport_lib.npu_attention.flash_api import install_flash_attn_shim, uninstall_flash_attn_shim

    src = tmp_path / "src"
    src.mkdir()
    (src / "modeling_own.py").write_text(OWN_MODEL)
    result = port_tree(src, tmp_path / "dst")
    modeling = Path(result.dst) / "modeling_own.py"
    modeling.write_text(modeling.read_text().replace(
        "from flash_attn_ascend import flash_attn_func", "from flash_attn import flash_attn_func"))
    install_flash_attn_shim("sdpa")  # a host where `import flash_attn` works
    try:
        proof = prove_port(src, result.dst)
    finally:
        uninstall_flash_attn_shim()
    assert proof.verdict == "FAIL" and "an import the port left" in proof.error


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_diff_of_each_vendored_model_applies_to_a_copy_of_it(name, tmp_path):
    import shutil
    import subprocess

    result = port_tree(REMOTE / name, tmp_path / "port")
    copy = tmp_path / "copy"
    shutil.copytree(REMOTE / name, copy)
    subprocess.run(["git", "apply", str(Path(result.dst) / "port.diff")], cwd=copy, check=True,
                   capture_output=True)
    for path in Path(result.dst).rglob("*"):
        if path.is_file() and path.name not in ("port.diff", "port.json"):
            assert (copy / path.relative_to(result.dst)).read_bytes() == path.read_bytes(), path.name
    assert port_tree(result.dst, tmp_path / "again").changes == []  # idempotent on real code
