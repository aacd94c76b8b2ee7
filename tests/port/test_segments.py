"""What the rewrite knows of a file before LibCST sees it (:mod:`hyport_lib.port.segments`):
the file cut at its top-level statements, only the segments with a CUDA word rewritten, the
header AddImportsVisitor reads, the file's names for torch and torch.cuda, the attention
guards, its import style and the values it unpacks from ``unpad_input``."""

from __future__ import annotations

import pytest

from hyport_lib.port import codemod, segments
from .test_tree import CUDA_FILE, _plain_functions


def test_only_segments_with_cuda_words_go_through_libcst(monkeypatch):
    parsed = []
    real_parse = codemod.cst.parse_module
    monkeypatch.setattr(codemod.cst, "parse_module", lambda text: parsed.append(text) or real_parse(text))
    source = CUDA_FILE + _plain_functions(200) + "def g(y):\n    return y.cuda()\n"
    result = codemod.port_python(source, "m.py", relative=False)
    assert [c.line for c in result.changes] == [5, 5 + 4 * 200 + 2]
    assert result.code.count("accelerator_device()") == 2
    # the two functions that change and the header (for the helper's import), not the 200
    assert sum(len(text) for text in parsed) < len(source) / 10


def test_a_file_is_cut_at_its_top_level_statements_and_only_cuda_words_are_marked():
    source = ('"""Doc."""\nimport torch as th\nfrom torch import cuda as tc\n\n\n@decorate\n'
              "def f(x):\n    return x + 1\n\n\nclass A:\n    x = tc.current_device()\n")
    plan = segments.plan(source)
    assert "".join(s.text for s in plan.segments) == source  # nothing lost, nothing added
    assert [s.first_line for s in plan.segments] == [1, 2, 3, 6, 11]  # a decorator starts its function
    assert [s.needs_rewrite for s in plan.segments] == [False, False, True, False, True]
    assert plan.torch_names == {"torch", "th"} and plan.cuda_names == {"tc"}
    assert plan.header_count == 4  # the docstring, the imports and the statement after them


def test_a_trigger_word_spelt_in_escapes_and_a_lone_cr_are_not_missed():
    escaped = segments.plan('x = 1\ny = "\\x63uda"\n')
    assert [s.needs_rewrite for s in escaped.segments] == [False, True]
    lone_cr = segments.plan("x = 1\ry = 2\n")  # a line end to ast, not to the cut: one segment
    assert len(lone_cr.segments) == 1


def test_only_attention_guards_have_positions_in_characters():
    source = ("def attention(q):\n    é = 1; assert q.is_cuda\n    return q\n\n\n"
              "def load(batch):\n    assert batch.is_cuda\n")
    # the guard's column counts characters (LibCST's: 18), not UTF-8 bytes (ast's: 19)
    assert segments.plan(source).guard_positions == {(2, 18)}


def test_relative_imports_and_unpad_arities_are_read_from_the_code_not_the_text():
    assert segments.uses_relative_imports("from .configuration import C\n")
    assert not segments.uses_relative_imports('text = "from . import x"\n')
    assert not segments.uses_relative_imports("from .x import (\n")  # does not parse
    code = ("a, b, c, d = unpad_input(x, m)\nw, x2, y, z, v = bert_padding.unpad_input(x, m)\n"
            "# unpad_input in prose\n")
    assert segments.unpad_arities(code) == {4, 5}
    assert segments.unpad_arities("x = 1\n") == set()


def test_a_file_that_is_no_python_names_its_line():
    with pytest.raises(segments.UnparsableSource, match="line 2"):
        segments.plan("x = 1\ndef (:\n")
    with pytest.raises(segments.UnparsableSource):
        segments.plan("x = 1\0\n")
