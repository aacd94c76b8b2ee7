"""Text made fit to print (hyport_lib/utils/printable.py): no terminal escape acts, no NUL,
an exception in one line, and what counts as a usage error."""

from __future__ import annotations

import pytest

from hyport_lib.utils.printable import USAGE_ERRORS, first_line, one_line, printable, shortened


def test_escape_sequences_go_and_control_characters_are_shown_not_acted_on():
    assert printable("plain\ttext") == "plain\ttext"
    assert printable("\x1b[31mred\x1b[0m \x1b]0;title\x07done") == "red done"
    assert printable("a\x00b\rc\x9bd") == "a\\x00b\\x0dc"  # C1 CSI "\\x9b" + final byte "d": a sequence
    assert printable("line\nnext", keep="\t\n") == "line\nnext" and printable("line\nnext") == "line\\x0anext"


def test_a_line_of_unterminated_escapes_is_read_in_linear_time():
    text = "\x1b]" * 20000
    assert "\x1b" not in printable(text)


def test_shortened_is_one_line_cut_with_an_ellipsis():
    assert shortened("a  b\n c", 10) == "a b c"
    assert shortened("abcdefghij", 5) == "abcd…" and len(shortened("x" * 50, 20)) == 20
    assert shortened(None, 5) == ""


def test_an_exception_in_one_line_names_the_file_not_the_errno():
    assert first_line(ValueError("first\nsecond")) == "first" and first_line(KeyError()) == "KeyError"
    missing = FileNotFoundError(2, "No such file or directory", "/data/model")
    assert one_line(missing) == "No such file or directory: /data/model"
    assert first_line(missing).startswith("[Errno 2]")
    assert one_line(RuntimeError("")) == "RuntimeError"


@pytest.mark.parametrize("exc", [ValueError("x"), FileNotFoundError("x"), PermissionError("x"), RuntimeError("x")])
def test_what_the_user_asked_wrongly_is_a_usage_error(exc):
    assert isinstance(exc, USAGE_ERRORS)


def test_a_defect_is_not_a_usage_error():
    assert not isinstance(KeyError("x"), USAGE_ERRORS) and not isinstance(AttributeError("x"), USAGE_ERRORS)
