"""What a stage gives the report: its index card, its draft section, its figures.

The report (``hyport_lib.report``) knows no stage by name. For each stage of a run it
imports the stage's ``hyport_lib.<name>.show`` module and calls the functions below
that the module defines; a stage without them (or a notebook-only stage, with no
package) gets the generic rendering: its recorded headline as a table. ``record`` is
always the stage's recorded result as read from ``results/NN_name.json`` (the dict
:func:`hyport_lib.results.record_result` wrote: ``stage``, ``verdict``, ``summary``,
``headline``, ``provenance``, ``data``); it may come from an older version or be odd, so
read it with :func:`~hyport_lib.drafting.values.dig` and friends. An exception in a
function is shown in place of its output; it never stops the report.

Index card (``index.html``, ``report.html``):

* ``glance(record) -> list[tuple[str, str]]``: the card's figures, (name, text) pairs,
  values written with :func:`~hyport_lib.drafting.values.fmt_value`;
* ``glance_svg(record) -> str``: an inline SVG drawn under them ("" for none).

Blog drafts (``blog.en.md``, ``blog.zh.md``), every text in ``draft.lang``:

* ``blog_title(lang) -> str``: the stage's name in section headings and lists;
* ``blog_section(record, draft) -> list[str]``: Markdown lines of the stage's section,
  after the report's heading, verdict, provenance and summary; called only when the
  stage finished and recorded data. ``draft`` is a :class:`~hyport_lib.drafting.draft.Draft`:
  ``draft.phrases(PHRASES)`` gives the stage's sentences on top of the shared words,
  ``draft.value`` / ``draft.yes_no`` / ``draft.prov`` write values, ``draft.figures``
  links figures, ``draft.facts`` holds what other stages established. Write recorded
  texts as code or quotations (:mod:`~hyport_lib.drafting.markdown`) and numbers with
  :func:`~hyport_lib.drafting.values.num`: a test checks every number of a draft
  against the recorded files and the Chinese draft for English prose;
* ``blog_figures(record) -> dict[str, Callable[[], Optional[Figure]]]``: figure name
  -> a function drawing it as a bare ``matplotlib.figure.Figure`` (None when the record
  holds nothing to draw). The report writes ``figures/<name>.png``, redrawn only when
  the record is newer, and lists it in ``draft.figures``; names are file names, unique
  across stages;
* ``blog_facts(record) -> dict``: run-wide facts other sections and the title use
  (``device``: the backend the run used; ``model_folder``: the model folder the stages
  loaded; ``cards``: the cards they used on this host); the first stage's value is kept;
* ``blog_notes(record) -> list[str]``: recorded notes that qualify the stage's figures,
  quoted among the caveats;
* ``blog_appendix(record, draft, *, in_run) -> list[str]``: a section of its own after
  the stages' sections (heading included), such as the dataset notes; ``record`` is None
  when the stage recorded no data, ``in_run`` False when the run left the stage out.
"""
