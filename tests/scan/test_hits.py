"""A scan's findings (:mod:`hyport_lib.scan.hits`): lines counted as the tokenizer counts them,
source decoded by its coding line, a hit's snippet, and the report's counts, filter and
record read back."""

from __future__ import annotations

from hyport_lib.scan.hits import SNIPPET_MAX, Hit, ScanReport, decode_source, hit_at, split_lines


def test_lines_end_at_newlines_and_carriage_returns_not_form_feeds():
    assert split_lines("a\r\nb\rc\nd\x0ce") == ["a", "b", "c", "d\x0ce"]


def test_source_is_decoded_by_its_coding_line_and_always_usable():
    assert decode_source("# -*- coding: latin-1 -*-\nx = 'caf\xe9'\n".encode("latin-1")) == (
        "# -*- coding: latin-1 -*-\nx = 'caf\xe9'\n", None)
    text, error = decode_source(b"# coding: no-such-codec\nx = 1\n")
    assert text.endswith("x = 1\n") and error.startswith("SyntaxError: ")
    text, error = decode_source(b"x = '\xff'\n")  # not UTF-8, no coding line
    assert text == "x = '\ufffd'\n" and error


def test_a_hit_shows_its_line_stripped_and_cut():
    lines = ["  x = torch.cuda.current_device()  ", "y = " + "1" * 300]
    assert hit_at("m.py", lines, 1, 6, "cuda_call", "s") == Hit(
        "m.py", 1, 6, "cuda_call", "x = torch.cuda.current_device()", "s")
    long = hit_at("m.py", lines, 2, 0, "cuda_call", "s").snippet
    assert len(long) == SNIPPET_MAX and long.endswith("…")
    assert hit_at("m.py", lines, 3, 0, "unparsable", "s").snippet == ""  # past the end


def test_a_report_counts_filters_and_reads_back():
    hits = [Hit("b.py", 1, 0, "nccl", "x", "s"), Hit("a.py", 2, 0, "cuda_call", "y", "s"),
            Hit("a.py", 3, 0, "nccl", "z", "s")]
    report = ScanReport("src", hits=hits, unparsable=[("c.py", "SyntaxError")], files_scanned=3,
                        skipped=[("pipe.py", "FIFO: not read")], pinned={"flash-attn": "==2.6.3 (r.txt:1)"})
    assert report.counts() == {"cuda_call": 1, "nccl": 2} and list(report.counts()) == ["cuda_call", "nccl"]
    assert not report.clean and not ScanReport("src", unparsable=[("c.py", "e")]).clean
    assert ScanReport("src").clean
    only = report.only(["cuda_call"])
    assert [h.line for h in only.hits] == [2] and only.unparsable == report.unparsable and not only.clean
    assert report.only(None) is report
    data = report.to_dict()
    assert data["unparsable"] == [{"file": "c.py", "error": "SyntaxError"}] and data["clean"] is False
    assert ScanReport.from_dict(data) == report


def test_an_odd_record_reads_back_as_defaults():
    assert ScanReport.from_dict(None).hits == []
    odd = ScanReport.from_dict({"root": "r", "unparsable": ["not a mapping", {"file": "x.py"}]})
    assert odd.root == "r" and odd.unparsable == [("x.py", "None")]
