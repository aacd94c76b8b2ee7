"""The drafts' templates and their Jinja environment (hyport_lib/drafting/templates.py): one
template per part in every language, the catalogues that translate it, the Markdown filters
that mark recorded text, the tidying of a rendered draft."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest
from babel.messages.pofile import read_po
from jinja2.ext import extract_from_ast

import hyport_lib
from hyport_lib.drafting import templates
from hyport_lib.drafting.templates import FRAME_TEMPLATE, environment, stage_template
from hyport_lib.stages import discover_stages

from blog_drafts import english_runs, numbers_in

PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def draft_templates() -> dict[str, Path]:
    """Every template the drafts are written from, by where it lives: the frame's and each
    stage's own (``hyport_lib/<name>/blog.md.j2``)."""
    package = Path(hyport_lib.__file__).parent
    found = {"report": package / FRAME_TEMPLATE}
    for stage in discover_stages():
        path = package / stage_template(stage.name)
        if path.is_file():
            found[stage.name] = path
    return found


def catalogue(template: Path, lang: str = "zh") -> dict:
    """The catalogue beside ``template``: (context, English) -> its text in ``lang``."""
    with template.with_name(f"blog.{lang}.po").open("rb") as handle:
        return {(m.context, m.id): m.string for m in read_po(handle) if m.id}


def template_parts(path: Path) -> tuple[list[str], set]:
    """The fixed text of a template that no catalogue translates (its text outside tags and
    the strings inside them, comments and the English of ``_()``/``pgettext()`` left out),
    and the messages it translates, as the catalogues key them."""
    env = environment("en")
    source = path.read_text(encoding="utf-8")
    messages = set()
    for _, function, found in extract_from_ast(env.parse(source)):
        strings = [text for text in ((found,) if isinstance(found, str) else found) if text is not None]
        messages.add(tuple(strings[:2]) if function == "pgettext" else (None, strings[0]))
    translated = {english for _, english in messages}
    texts = [token.value for token in env.lexer.tokenize(source)
             if token.type == "data" or (token.type == "string" and token.value not in translated)]
    return texts, messages


@pytest.mark.parametrize("where", sorted(draft_templates()))
def test_fixed_sentences_hold_no_digit_and_both_languages_say_the_same_things(where):
    path = draft_templates()[where]
    texts, messages = template_parts(path)
    chinese = catalogue(path)
    assert texts and messages
    # Every message has its Chinese beside the template, and the catalogue holds no other.
    assert set(chinese) == messages, set(chinese) ^ messages
    # Names such as float64 are words, not figures; a free-standing number would be one.
    with_digits = [t for t in texts + [e for _, e in messages] + list(chinese.values()) if numbers_in(t)]
    assert not with_digits, with_digits
    # The same values in both, so every figure appears in both drafts; and each text is a
    # valid format (a lone % would stop the draft).
    for (_, english), text in chinese.items():
        assert set(PLACEHOLDER.findall(english)) == set(PLACEHOLDER.findall(text)), (english, text)
        values = {name: "x" for name in PLACEHOLDER.findall(english)}
        assert english % values and text % values


def test_no_english_sentence_in_any_chinese_text():
    """A Chinese sentence holds no run of English words outside marked code (names such
    as ``max_seq_len`` or ``DeepSpeed ZeRO`` stay as they are), nor does the text that every
    language shows as it is."""
    found_templates = draft_templates()
    assert {"report", "environment", "train"} <= set(found_templates)
    for where, path in found_templates.items():
        found = [run for text in [*template_parts(path)[0], *catalogue(path).values()]
                 for run in english_runs(text)]
        assert not found, (where, found)


def test_the_catalogues_merge_and_a_language_without_text_is_refused(tmp_path, monkeypatch):
    """One English text has one Chinese in every part of a draft: the catalogues merge, and
    a stage whose catalogue says a shared text otherwise is named. English is the templates' own."""
    said = '{{ _("Prompt") }} {{ pgettext("verdict", "PASS") }}'
    assert environment("zh").from_string(said).render() == "提示 通过"
    assert environment("en").from_string(said).render() == "Prompt PASS"
    with pytest.raises(ValueError, match="lang='fr'"):
        environment("fr")
    planted = tmp_path / "extra" / "blog.zh.po"
    planted.parent.mkdir()
    planted.write_text('msgid "Prompt"\nmsgstr "提问"\n', encoding="utf-8")
    monkeypatch.setattr(hyport_lib, "__path__", [*hyport_lib.__path__, str(tmp_path)])
    with pytest.raises(ValueError, match=r"extra/blog\.zh\.po: 'Prompt' is translated otherwise in .*blog\.zh\.po"):
        environment("zh")


def test_a_recorded_text_is_marked_as_code_whatever_backticks_it_holds():
    assert templates.code("a  b\nc") == "`a b c`"
    assert templates.code("x `y` z") == "`` x `y` z ``"
    assert templates.code(None) == templates.code(jinja2.ChainableUndefined()) == "`—`"
    assert templates.code("") == templates.code("  ") == "—"


def test_a_table_row_stays_one_row_and_a_missing_value_is_an_empty_cell():
    assert templates.row("a|b", "two\nlines", None, jinja2.ChainableUndefined()) == "| a\\|b | two lines |  |  |"
    assert templates.header("k", "v") == "| k | v |\n|---|---|"


def test_quotations_and_fences_hold_what_they_quote():
    assert templates.quote("first\n\nsecond\n") == "> first\n>\n> second\n"
    assert templates.quote(None) == templates.quote("") == ""
    assert templates.fenced("a ``` b", "text") == "````text\na ``` b\n````\n"


def test_recorded_free_text_is_code_only_in_chinese():
    assert templates.recorded("an  English\nmessage", "en") == "an English message"
    assert templates.recorded("an English message", "zh") == "`an English message`"
    assert templates.recorded(None, "zh") == templates.recorded("", "en") == "—"


def test_an_odd_record_gives_empty_lists_and_a_failing_part_says_why():
    assert templates.as_list("text") == [] and templates.as_list((1, 2)) == [1, 2]
    assert templates.records([3, None, {"a": 1}]) == [{"a": 1}]
    assert templates.attempt(lambda: 1 / 0).error.startswith("ZeroDivisionError")
    assert templates.attempt(lambda x: x * 2, 21) == ("42", "")


def test_a_draft_is_tidied_to_one_blank_line_between_blocks_but_fences_are_kept():
    text = "\n\n# T  \n\n\n\ntext\n```\nkept  \n\n\n```\n\n"
    assert templates.tidy(text) == "# T\n\ntext\n```\nkept  \n\n\n```\n"
