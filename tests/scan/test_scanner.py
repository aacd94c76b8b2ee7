"""The static port scan: planted findings in tests/data/scan_tree at exact lines."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hyport_lib.commands import main as hyport_main
from hyport_lib.scan.hits import ScanReport
from hyport_lib.scan.rules import CATEGORIES
from hyport_lib.scan.scanner import DEFAULT_EXCLUDE, scan_path
from hyport_lib.scan.show import scan_tables, show_scan

TREE = Path(__file__).parents[1] / "data" / "scan_tree"
REPO = Path(__file__).resolve().parents[2]

#: (file, line, category) of every planted finding; see tests/data/scan_tree/README.md.
EXPECTED = {
    # flash_attn imports and call, CUDA devices and calls, nccl, attn_implementation
    *{("model/modeling_vlm.py", line, cat) for line, cat in [
        (9, "flash_attn"), (10, "flash_attn"), (17, "flash_attn"), (22, "cuda_env"), (23, "nccl"),
        (24, "cuda_call"), (25, "cuda_call"), (26, "cuda_device"), (27, "cuda_device"),
        (28, "cuda_device"), (29, "cuda_device"), (30, "cuda_call"), (38, "flash_attn"),
        (38, "cuda_device")]},
    *{("model/guarded.py", line, cat) for line, cat in [
        (5, "flash_attn"), (10, "xformers"), (18, "flash_attn"), (19, "flash_attn"),
        (20, "xformers"), (21, "xformers"), (22, "cuda_call")]},
    *{("model/kernels.py", line, cat) for line, cat in [
        (2, "bitsandbytes"), (3, "triton"), (4, "triton"), (5, "apex"), (8, "triton"),
        (15, "apex"), (19, "bitsandbytes")]},
    *{("model/dynamic.py", line, cat) for line, cat in [
        (5, "flash_attn"), (9, "xformers"), (14, "cuda_call"), (18, "cuda_device"), (20, "nccl")]},
    # does not parse: reported, then scanned line by line (`!pip install`, f"cuda:{rank}")
    *{("legacy/broken_py2.py", line, cat) for line, cat in [
        (3, "flash_attn"), (5, "unparsable"), (5, "cuda_call"), (6, "cuda_call"),
        (7, "requirement"), (8, "cuda_device"), (9, "cuda_device")]},
    ("scripts/train.sh", 3, "requirement"), ("scripts/train.sh", 4, "nccl"),
    ("scripts/train.sh", 5, "cuda_env"), ("scripts/train.sh", 6, "requirement"),
    *{("requirements.txt", line, "requirement") for line in (2, 4, 6, 8)},
    ("requirements-extra.txt", 1, "requirement"),
    *{("pyproject.toml", line, "requirement") for line in (10, 15, 17)},
    *{("setup.py", line, "requirement") for line in (5, 11, 12)},
    *{("setup.cfg", line, "requirement") for line in (9, 12)},
    *{("environment.yml", line, "requirement") for line in (7, 10)},
}

#: Lines that only mention the names in prose, comments or metadata.
PROSE = {
    ("model/modeling_vlm.py", 3), ("model/modeling_vlm.py", 12), ("model/modeling_vlm.py", 13),
    ("requirements.txt", 1), ("pyproject.toml", 7), ("setup.py", 9), ("setup.py", 10),
    ("setup.cfg", 3), ("scripts/train.sh", 2), ("environment.yml", 3),
}


@pytest.fixture(scope="module")
def report() -> ScanReport:
    return scan_path(TREE)


@pytest.fixture(scope="module")
def own_scan() -> ScanReport:
    """hyport_lib scanned once for the tests that read it (``only`` returns a copy)."""
    return scan_path(REPO / "hyport_lib")


def _triples(report: ScanReport) -> set:
    return {(h.file, h.line, h.category) for h in report.hits}


def test_fixture_tree_hits_are_exactly_the_planted_ones(report):
    found = _triples(report)
    assert found - EXPECTED == set(), "unexpected findings"
    assert EXPECTED - found == set(), "planted findings missed"
    assert report.files_scanned == 13  # README.md and node_modules/ are not read
    assert not report.clean


def test_snippet_is_the_source_line_the_hit_names(report):
    assert report.hits
    for hit in report.hits:
        lines = (TREE / hit.file).read_text(encoding="utf-8").splitlines()
        assert hit.snippet == lines[hit.line - 1].strip(), hit
        assert 0 <= hit.col <= len(lines[hit.line - 1]), hit
        assert hit.category in CATEGORIES
        assert hit.suggestion


def test_prose_comments_and_the_clean_file_are_not_findings(report):
    lines = {(h.file, h.line) for h in report.hits}
    assert PROSE & lines == set()
    assert not [h for h in report.hits if h.file == "model/clean_module.py"]
    assert not scan_path(TREE / "model" / "clean_module.py").hits


def test_guarded_imports_say_so(report):
    by_line = {(h.file, h.line, h.category): h.suggestion for h in report.hits}
    assert by_line[("model/guarded.py", 5, "flash_attn")].startswith("guarded import")
    assert by_line[("model/guarded.py", 10, "xformers")].startswith("guarded import")
    assert "guarded" not in by_line[("model/modeling_vlm.py", 9, "flash_attn")]


def test_suggestions_are_the_ascend_replacements(report):
    by_line = {(h.file, h.line, h.category): h.suggestion for h in report.hits}
    varlen = by_line[("model/modeling_vlm.py", 17, "flash_attn")]
    assert "'TND'" in varlen and "actual_seq_qlen=cu_seqlens_q[1:]" in varlen
    assert "import its names from there" in varlen and "flash_attn_ascend" in varlen
    assert "x.to(accelerator_device(i))" in by_line[("model/modeling_vlm.py", 25, "cuda_call")]
    assert by_line[("model/modeling_vlm.py", 30, "cuda_call")] == (
        "torch.npu.synchronize on NPU; hyport port writes accelerator_module().synchronize "
        "(from flash_attn_ascend)")
    assert "hccl" in by_line[("model/modeling_vlm.py", 23, "nccl")]
    assert "ASCEND_RT_VISIBLE_DEVICES" in by_line[("model/modeling_vlm.py", 22, "cuda_env")]
    autocast = by_line[("model/guarded.py", 22, "cuda_call")]
    assert "torch.autocast(device_type=accelerator_type()" in autocast
    assert "hf_attn_implementation()" in by_line[("model/modeling_vlm.py", 38, "flash_attn")]
    assert "not supported on Ascend" in by_line[("requirements-extra.txt", 1, "requirement")]
    assert "torch_npu" in by_line[("requirements.txt", 2, "requirement")]


def test_syntax_error_is_reported_and_not_fatal(report):
    assert [f for f, _ in report.unparsable] == ["legacy/broken_py2.py"]
    error = dict(report.unparsable)["legacy/broken_py2.py"]
    assert error.startswith("SyntaxError") and "line 5" in error
    fallback = [h for h in report.hits
                if h.file == "legacy/broken_py2.py" and h.category != "unparsable"]
    assert fallback and all("line scan" in h.suggestion for h in fallback)


def test_excluded_folders_are_not_scanned(report):
    assert "node_modules" in DEFAULT_EXCLUDE
    assert not [h for h in report.hits if h.file.startswith("node_modules/")]
    trimmed = scan_path(TREE, exclude=DEFAULT_EXCLUDE + ("legacy", "model/*.py"))
    assert trimmed.unparsable == []
    assert {h.file for h in trimmed.hits}.isdisjoint({"legacy/broken_py2.py", "model/guarded.py"})
    assert _triples(trimmed) < EXPECTED


def test_a_single_file_can_be_scanned():
    single = scan_path(TREE / "model" / "modeling_vlm.py")
    assert single.files_scanned == 1
    expected = {("modeling_vlm.py", line, cat)
                for f, line, cat in EXPECTED if f == "model/modeling_vlm.py"}
    assert _triples(single) == expected


def test_counts(report):
    assert report.counts() == dict(sorted(Counter(h.category for h in report.hits).items()))
    requirement_lines = {(h.file, h.line) for h in report.hits if h.category == "requirement"}
    assert len(requirement_lines) == sum(1 for t in EXPECTED if t[2] == "requirement")
    assert report.counts()["requirement"] == len(requirement_lines) + 1  # train.sh:6 has two
    # files that do not parse stay in any filtered view: they are never "clean"
    assert report.only(["nccl"]).counts() == {"nccl": report.counts()["nccl"], "unparsable": 1}


def test_bad_input_names_the_argument(tmp_path):
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        scan_path(tmp_path / "does-not-exist")
    (tmp_path / "notes.md").write_text("import flash_attn\n")
    with pytest.raises(ValueError, match="notes.md"):
        scan_path(tmp_path / "notes.md")


def test_pragmas_silence_deliberate_lines(tmp_path):
    (tmp_path / "seam.py").write_text(
        "import torch\n"
        "torch.cuda.synchronize()  # hyport-scan: ignore (the seam's job)\n"
        "x = torch.ones(1).cuda()\n")
    (tmp_path / "table.py").write_text("# hyport-scan: ignore-file\nNAMES = ['nccl', 'cuda']\n")
    (tmp_path / "prose.py").write_text('"""Mark it hyport-scan: ignore-file."""\nB = "nccl"\n')
    found = scan_path(tmp_path)
    assert _triples(found) == {("seam.py", 3, "cuda_call"), ("prose.py", 2, "nccl")}


def test_pyproject_poetry_groups_and_odd_tables(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\noptional-dependencies = "not a table"\n'
        '[dependency-groups]\ndev = [{include-group = "test"}, "xformers"]\n'
        '[tool.poetry.dependencies]\npython = "^3.10"\nflash-attn = "^2.5"\n'
        '[tool.poetry.group.gpu.dependencies]\nbitsandbytes = "*"\n')
    found = scan_path(tmp_path / "pyproject.toml")
    assert _triples(found) == {("pyproject.toml", line, "requirement") for line in (5, 8, 10)}


def test_pyproject_without_a_toml_reader_finds_the_same_lines(monkeypatch):
    """Python 3.10 without tomli: quoted requirement strings are checked line by line."""
    from hyport_lib.scan import dependencies

    with_toml = _triples(scan_path(TREE / "pyproject.toml"))
    monkeypatch.setattr(dependencies, "tomllib", None)
    assert _triples(scan_path(TREE / "pyproject.toml")) == with_toml
    assert with_toml == {("pyproject.toml", t[1], t[2]) for t in EXPECTED if t[0] == "pyproject.toml"}


def test_broken_pyproject_is_reported_and_still_checked(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = [\n    "flash-attn>=2",\n  oops\n]\n')
    found = scan_path(tmp_path)
    assert [f for f, _ in found.unparsable] == ["pyproject.toml"]
    assert ("pyproject.toml", 4, "requirement") in _triples(found)
    assert any(h.category == "unparsable" for h in found.hits)


def test_unreadable_and_binary_files_are_reported_not_fatal(tmp_path):
    (tmp_path / "dangling.py").symlink_to(tmp_path / "missing" / "target.py")
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\nimport flash_attn\n")
    (tmp_path / "deep.py").write_text("x = " + "(" * 300 + "1" + ")" * 300 + "\n")
    # parses, but deeper than the visitor may recurse
    (tmp_path / "long.py").write_text("x = " + "+".join(["1"] * 900) + "\nx.cuda()\n")
    found = scan_path(tmp_path)
    assert {f for f, _ in found.unparsable} == {"nul.py", "deep.py", "long.py"}
    assert [(f, why.split(" (")[0]) for f, why in found.skipped] == [("dangling.py", "dangling symlink")]
    assert ("long.py", 2, "cuda_call") in _triples(found)
    assert ("nul.py", 2, "flash_attn") in _triples(found)  # found by the line scan


def test_hyport_lib_itself_scans_without_crashing(own_scan):
    own = own_scan
    assert own.files_scanned > 0
    assert own.unparsable == []


def test_show_scan_renders(report, monkeypatch):
    import IPython.display

    counts, by_line, suggestions = scan_tables(report)
    assert dict(zip(counts["category"], counts["hits"])) == report.counts()
    assert "flash_attn_varlen_func" in by_line.to_html()
    # one row per source line; each suggestion once per kind
    lines = by_line.data
    assert len(lines) == len({(h.file, h.line) for h in report.hits})
    assert len(suggestions.data) == len(set(zip(suggestions.data["kind"], suggestions.data["suggestion"])))
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append(obj))
    assert show_scan(report) is None
    assert "13 files scanned" in shown[0].data and "legacy/broken_py2.py" in shown[0].data
    assert "torch.npu.synchronize" in shown[-1].to_html()
    shown.clear()
    show_scan(scan_path(TREE / "model" / "clean_module.py"))
    assert len(shown) == 1 and "clean" in shown[0].data


# --- the command line ------------------------------------------------------------------
def test_cli_exits_1_with_hits_and_0_on_a_clean_tree(tmp_path, capsys):
    assert hyport_main(["scan", str(TREE)]) == 1
    out = capsys.readouterr().out
    assert "model/modeling_vlm.py:17" in out and "== flash_attn (" in out
    assert "unparsable: legacy/broken_py2.py: SyntaxError" in out
    assert hyport_main(["scan", str(TREE), "--exit-zero"]) == 0
    capsys.readouterr()
    shutil.copy(TREE / "model" / "clean_module.py", tmp_path / "clean_module.py")
    assert hyport_main(["scan", str(tmp_path)]) == 0
    assert "clean" in capsys.readouterr().out


def test_cli_json_parses_and_filters(report, capsys):
    assert hyport_main(["scan", str(TREE), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["files_scanned"] == report.files_scanned
    assert {(h["file"], h["line"], h["category"]) for h in data["hits"]} == EXPECTED
    assert data["counts"] == report.counts()
    assert hyport_main(["scan", str(TREE), "--json", "--category", "nccl,cuda_env"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert set(data["counts"]) == {"nccl", "cuda_env", "unparsable"}
    assert [u["file"] for u in data["unparsable"]] == ["legacy/broken_py2.py"]


def test_cli_rejects_bad_arguments(capsys):
    assert hyport_main(["scan", str(TREE), "--category", "gpu"]) == 2
    assert "--category" in capsys.readouterr().err
    assert hyport_main(["scan", str(TREE / "nope")]) == 2


# --- review fixes: install commands in code, the line scan, code that follows the advice ----
def _scan_text(tmp_path, name: str, text: str) -> ScanReport:
    (tmp_path / name).write_text(text)
    return scan_path(tmp_path / name)


def test_every_package_of_every_install_command_on_a_shell_line(report):
    line6 = [h for h in report.hits if (h.file, h.line) == ("scripts/train.sh", 6)]
    assert [h.snippet[h.col:].split()[0] for h in line6] == ["xformers", "flash-attn"]
    assert "scaled_dot_product_attention" in line6[0].suggestion
    assert "npu_fusion_attention" in line6[1].suggestion


def test_index_url_of_a_cuda_torch_install_is_one_finding(tmp_path):
    found = _scan_text(tmp_path, "setup.sh",
                       "pip install torch==2.1.0+cu121 --index-url "
                       "https://download.pytorch.org/whl/cu121 && pip install numpy\n")
    assert [(h.line, h.category) for h in found.hits] == [(1, "requirement")]
    assert "CUDA build of torch" in found.hits[0].suggestion


def test_install_commands_in_python_strings(tmp_path):
    found = _scan_text(tmp_path, "app.py", (
        "import os, subprocess\n"
        "subprocess.run('pip install flash-attn --no-build-isolation',\n"
        "               env={'FLASH_ATTENTION_SKIP_CUDA_BUILD': 'TRUE'}, shell=True)\n"
        'os.system("pip install xformers && python -m pip install numpy bitsandbytes")\n'
        'os.system("pip install numpy")\n'
        '"""Docs: pip install flash-attn is no longer needed."""\n'
        'NOTE = "we dropped: pip install flash-attn"\n'))
    assert _triples(found) == {("app.py", 2, "requirement"), ("app.py", 3, "flash_attn"),
                               ("app.py", 4, "requirement")}
    by_line = {h.line: h.suggestion for h in found.hits}
    assert "flash_attn_ascend" in by_line[2] and "drop it with the install" in by_line[3]
    assert by_line[4].startswith("xformers: remove: torch.nn.functional.scaled_dot_product")
    assert " | bitsandbytes: remove: not supported on Ascend" in by_line[4]


def test_line_scan_of_an_unparsable_notebook_export(tmp_path):
    found = _scan_text(tmp_path, "nb_export.py", (
        "import torch\n"
        "%pip install flash-attn\n"
        "# !pip install xformers (a comment)\n"
        "x = t.to(f'cuda:{rank}')\n"
        "y = t.to('cuda:' + str(rank))\n"
        "if t.is_cuda: pass\n"
        "dev = 'cudagraph'\n"))
    assert _triples(found) == {("nb_export.py", line, cat) for line, cat in [
        (2, "unparsable"), (2, "requirement"), (4, "cuda_device"), (5, "cuda_device"),
        (6, "cuda_device")]}
    assert all("line scan" in h.suggestion for h in found.hits if h.category != "unparsable")


def test_a_filtered_report_of_an_unparsable_file_is_not_clean(tmp_path, capsys):
    (tmp_path / "b2.py").write_text('import os\nprint "x"\n')
    filtered = scan_path(tmp_path).only(["flash_attn", "requirement"])
    assert not filtered.clean and [f for f, _ in filtered.unparsable] == ["b2.py"]
    assert hyport_main(["scan", str(tmp_path), "--category", "flash_attn,requirement"]) == 1
    assert "unparsable: b2.py: SyntaxError" in capsys.readouterr().out


def test_code_that_follows_the_advice_is_not_flagged(tmp_path):
    found = _scan_text(tmp_path, "ported.py", (
        "import torch\n"
        "from hyport_lib.backend import get_backend\n"
        "backend = get_backend()\n"
        "if backend.kind == 'cuda':\n"
        "    torch.backends.cuda.matmul.allow_tf32 = True\n"
        "elif backend.kind == 'npu' and x.device.type == 'cuda':\n"
        "    pass\n"
        "if backend.kind != 'cuda':\n"
        "    torch.cuda.synchronize()\n"
        "else:\n"
        "    torch.cuda.synchronize()\n"
        "CHOICES = ('auto', 'npu', 'cuda', 'cpu')\n"
        "NAMES = {'cpu': 'CPU', 'cuda': 'CUDA', 'npu': 'NPU'}\n"
        "owner = 'npu' if ascend else 'cuda'\n"
        "if name in ['npu', 'cuda']: pass\n"
        "if kind == 'cuda' and torch.cuda.is_available():\n"
        "    x = x.cuda()\n"
        "if self.device == 'cuda': pass\n"
        "GPU_ONLY = ('cuda', 'cpu')\n"))
    # still findings: the NotEq branch itself, a compare with a plain attribute, a
    # tuple without "npu"
    assert _triples(found) == {("ported.py", 9, "cuda_call"), ("ported.py", 18, "cuda_device"),
                               ("ported.py", 19, "cuda_device")}


def test_hyport_lib_backend_enumerations_are_not_findings(own_scan):
    own = own_scan.only(["cuda_device"])
    enumerations = [h for h in own.hits if '"npu",' in h.snippet or '"npu":' in h.snippet]
    assert enumerations == []
    assert not [h for h in own.hits if h.file.startswith("scan/")]


def test_cli_says_how_many_files_were_not_parsed(capsys):
    assert hyport_main(["scan", str(TREE / "legacy" / "broken_py2.py"), "--category", "flash_attn"]) == 1
    out = capsys.readouterr().out
    assert "1 file not parsed" in out and "unparsable: broken_py2.py" in out


GUARDED_MODEL = '''
import torch
from flash_attn import flash_attn_func, flash_attn_varlen_func, flash_attn_qkvpacked_func


class VisionAttention(torch.nn.Module):
    def forward(self, qkv):
        assert qkv.is_cuda, "flash path needs CUDA"
        return flash_attn_qkvpacked_func(qkv)


class TextAttention(torch.nn.Module):
    def forward(self, q, k, v):
        if q.is_cuda:
            return flash_attn_func(q, k, v, causal=True)
        return self.eager(q, k, v)


def to_device(x):
    return x if x.is_cuda else x.cuda()


def to_device_checked(batch):
    assert batch.is_cuda, "dataloader must pin to gpu"
    return batch


class FlashAttention2(torch.nn.Module):
    def forward(self, x):
        assert x.is_cuda
        return self.kernel(x)
'''


def test_is_cuda_guards_around_attention_are_named_with_what_they_do(tmp_path):
    from hyport_lib.commands.scan import format_text

    (tmp_path / "modeling_guarded.py").write_text(GUARDED_MODEL)
    (tmp_path / "requirements.txt").write_text("torch\nflash-attn==2.5.8\n")
    report = scan_path(tmp_path)
    guards = {h.line: h.suggestion for h in report.hits if h.category == "is_cuda_guard"}
    # the data helper's assert (line 24) guards no attention, though the file has some;
    # the assert in a method of a class named for attention does (line 30)
    assert sorted(guards) == [8, 14, 30]
    assert guards[8].startswith("stops the flash path") and guards[14].startswith("silently falls back")
    # an is_cuda test that guards no attention code stays a plain device finding
    assert [h.category for h in report.hits if h.line == 20] == ["cuda_device", "cuda_call"]
    assert report.pinned == {"flash-attn": "==2.5.8 (requirements.txt:2)"}
    text = format_text(report)
    import_line = "modeling_guarded.py:3"
    assert sum(1 for line in text.splitlines() if line.startswith(import_line + " ")) == 1
    # each suggestion once per kind, with the lines it covers
    dense = [line for line in text.splitlines() if "'BSND'" in line]
    assert len(dense) == 1 and "modeling_guarded.py:9" in dense[0] and "modeling_guarded.py:15" in dense[0]
    assert "flash-attn pinned: ==2.5.8" in text


@pytest.mark.parametrize("line,version", [
    ("flash_attn @ https://github.com/Dao-AILab/flash-attention/releases/download/v2.5.8/"
     "flash_attn-2.5.8+cu122torch2.3cxx11abiFALSE-cp310-cp310-linux_x86_64.whl", "2.5.8"),
    ("https://github.com/Dao-AILab/flash-attention/releases/download/v2.6.3/"
     "flash_attn-2.6.3+cu123torch2.4cxx11abiFALSE-cp311-cp311-linux_x86_64.whl", "2.6.3"),
    ("flash-attn @ git+https://github.com/Dao-AILab/flash-attention.git@v2.4.2", "2.4.2"),
])
def test_a_flash_attn_pinned_by_wheel_or_git_tag_is_reported_as_pinned(tmp_path, line, version):
    (tmp_path / "requirements.txt").write_text(f"torch\n{line}\n")
    assert scan_path(tmp_path).pinned == {"flash-attn": f"=={version} (requirements.txt:2)"}


def test_the_notebook_scan_names_a_pin_whose_unpad_input_differs_from_the_served_api(tmp_path, monkeypatch):
    import IPython.display

    (tmp_path / "requirements.txt").write_text("flash-attn==2.6.3\n")
    (tmp_path / "m.py").write_text("from flash_attn.bert_padding import unpad_input\n")
    report = scan_path(tmp_path)
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append(obj))
    show_scan(report, served="2.7.4.post1")
    text = shown[0].data
    assert "`flash-attn` pinned by the project: `==2.6.3 (requirements.txt:1)`" in text
    assert "returns 5 values; code written for 2.6.3 expects 4" in text
    assert 'flash_attn_version = "2.6.3"' in text
    shown.clear()
    show_scan(report, served="2.6.3")
    assert "pinned by the project" in shown[0].data and "expects" not in shown[0].data


@pytest.mark.parametrize("spec,version", [
    ("==2.6.3 (requirements.txt:2)", "2.6.3"), ("<2.7", "2.6.3"), ("<2.7 (setup.py:3)", "2.6.3"),
    (">=2.5,<2.6", "2.5.9"), (">=2.7", "2.8.3"), ("==2", "2"),
    ("~=2.6", None),  # 2.6 and 2.7 both qualify: the pin does not tell which unpad_input
    ("nonsense", None),
    # conda's =X and local build tags pin X
    ("=2.6.3 (environment.yml:3)", "2.6.3"), ("==2.6.3+cu122 (requirements.txt:1)", "2.6.3"),
])
def test_the_api_a_pin_expects(spec, version):
    from hyport_lib.utils.imports import pinned_version

    assert pinned_version(spec) == version


def test_a_range_below_2_7_is_told_it_gets_the_five_value_unpad_input(tmp_path, monkeypatch):
    import IPython.display

    (tmp_path / "requirements.txt").write_text("flash-attn<2.7\n")
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append(obj))
    show_scan(scan_path(tmp_path), served="2.7.4.post1")
    assert "code written for 2.6.3 expects 4" in shown[0].data


@pytest.mark.slow
def test_scan_skips_fifos_and_names_symlink_loops(tmp_path):
    (tmp_path / "ok.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "loop.py").symlink_to(tmp_path / "loop.py")
    out = subprocess.run([sys.executable, "-m", "hyport_lib", "scan", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)  # would hang on the FIFO
    assert out.returncode == 1 and "ok.py" in out.stdout
    assert "symlink loop" in out.stdout + out.stderr and "does not exist" not in out.stdout


def test_a_link_out_of_the_scanned_folder_is_named_never_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "bashrc").write_text("export HF_TOKEN=hf_FAKEsecret123456\nimport flash_attn\n")
    model = tmp_path / "model"
    model.mkdir()
    (model / "modeling_helpers.py").symlink_to(outside / "bashrc")
    report = scan_path(model)
    assert report.files_scanned == 0 and not report.hits
    assert report.skipped == [("modeling_helpers.py", "symlink out of the scanned folder: not read")]


def test_a_fifo_named_directly_is_refused(tmp_path, capsys):
    os.mkfifo(tmp_path / "fifo.py")
    assert hyport_main(["scan", str(tmp_path / "fifo.py")]) == 2
    assert "not a regular file" in capsys.readouterr().err
