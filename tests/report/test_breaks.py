"""Where a printed table cell may break: at spaces, and in a long token only at the <wbr>
put after ``_``, a path's ``/`` and a dotted name's dots; never inside a number or a word."""

import json

from hyport_lib.report.breaks import breakable, breakable_cells


def test_long_tokens_break_only_where_a_wbr_is_put_and_numbers_stay_whole():
    assert breakable("decode_tokens_per_s") == "decode_<wbr>tokens_<wbr>per_<wbr>s"
    assert breakable("&lt;run&gt;/train/smoke") == "&lt;run&gt;/<wbr>train/<wbr>smoke"
    assert breakable("layers.1.self_attn.q_proj.weight") == "layers.1.<wbr>self_<wbr>attn.<wbr>q_<wbr>proj.<wbr>weight"
    for number in ("6.7093", "11.592", "2,273.4"):
        assert breakable(number) == number
    # a browser breaks after - | / inside a word: such a piece is kept whole
    for whole in ("2.38e-07", "171/0/0", "|Δ", "npu-emulated"):
        assert breakable(whole) == f'<span class="hy-nb">{whole}</span>'
    assert breakable("card 0 (npu-emulated)") == 'card 0 <span class="hy-nb">(npu-emulated)</span>'


def test_only_cells_text_changes_and_wide_tables_are_marked():
    head = "".join(f"<th>c_{i}</th>" for i in range(12))
    page = (f'<p>a_b</p><table id="T"><tr>{head}</tr><tr><td class="x_y"><b>run_name</b> 1-2</td></tr></table>'
            '<table><tr><th>a_b</th></tr></table>')
    out = breakable_cells(page)
    assert out.startswith('<p>a_b</p><table data-hy-wide="" id="T">')  # outside a cell: as it was
    assert '<td class="x_y"><b>run_<wbr>name</b> <span class="hy-nb">1-2</span></td>' in out
    assert out.endswith("<table><tr><th>a_<wbr>b</th></tr></table>")  # one column: not wide


def test_a_quoted_attribute_holding_a_bracket_is_left_as_it_is():
    page = '<table><tr><td><span title="loss first -> last_value">x_y</span></td></tr></table>'
    assert breakable_cells(page) == ('<table><tr><td><span title="loss first -> last_value">x_<wbr>y</span>'
                                     '</td></tr></table>')
    assert breakable("<a title='a > b_c'>d_e</a>") == "<a title='a > b_c'>d_<wbr>e</a>"


def test_script_style_and_pre_content_is_left_as_it_is():
    state = json.dumps({"value": "<table><tr><td>npu-emulated a_b</td></tr></table>"})
    script = f'<script type="application/vnd.jupyter.widget-state+json">{state}</script>'
    style = "<style>td::after{content:'a_b</td>'}</style>"
    assert breakable_cells(script + style) == script + style
    pre = "<pre>model.layers.0.self_attn\n  q_proj-x</pre>"
    assert breakable_cells(f"<table><tr><td>{pre} a_b</td></tr></table>") == \
        f"<table><tr><td>{pre} a_<wbr>b</td></tr></table>"


def test_an_underscore_between_digits_is_no_break():
    assert breakable("1_000_000") == "1_000_000"
    assert breakable("max_steps_1") == "max_<wbr>steps_1"
