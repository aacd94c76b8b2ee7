"""What a stage gives the report: its index card, its draft section, its figures.

The report (``hyport_lib.report``) knows no stage by name. For each stage of a run it
imports the stage's ``hyport_lib.<name>.show`` module and calls the functions below
that the module defines; a stage without them (or a notebook-only stage, with no
package) gets the generic rendering: its recorded headline as a table. ``record`` is
always the stage's recorded result as read from ``results/NN_name.json`` (the dict
:func:`hyport_lib.results.record_result` wrote: ``stage``, ``verdict``, ``summary``,
``headline``, ``provenance``, ``data``); it may come from an older version or be odd, so
read it typed with :meth:`hyport_lib.results.StageRecord.from_dict` (a shape problem never
raises; see :mod:`hyport_lib.utils.records`). An exception in a
function is shown in place of its output; it never stops the report.

Index card (``index.html``, ``report.html``):

* ``glance(record) -> list[tuple[str, str]]``: the card's figures, (name, text) pairs,
  values written with :func:`~hyport_lib.drafting.values.fmt_value`;
* ``glance_svg(record) -> str``: an inline SVG drawn under them ("" for none).

Blog drafts (``blog.en.md``, ``blog.zh.md``): a stage's part is a Jinja template per
language beside its ``show`` module, ``blog.<lang>.md.j2`` (package data), imported by
the report's frame (``report/templates/blog/blog.<lang>.md.j2``) with its context:
``lang``, ``host``, ``parameters``, ``versions``, ``facts`` (what other stages
established), ``figures`` (name -> relative path) and the shared words and macros
(``item``, ``value_word``, ``result_word``, ``value``, ``yes_no``, ``prov``). The
template defines the macros

* ``title()``: the stage's name in section headings and lists;
* ``section(r, x)``: Markdown of the stage's section, after the report's heading,
  verdict, provenance and summary; called only when the stage finished and recorded
  data. ``r`` is the record, ``x`` what ``blog_values`` derived from it;
* ``appendix(r, x, in_run)`` (optional): a section of its own after the stages' sections
  (heading included), such as the dataset notes; ``r`` is None when the stage recorded
  no data, ``in_run`` False when the run left the stage out.

Write recorded texts with the filters ``code``, ``quote``, ``recorded`` or ``fenced`` and
numbers with ``num`` (:mod:`~hyport_lib.drafting.templates`): a test checks every number
of a draft against the recorded files, that no template sentence holds a digit and the
Chinese draft for English prose. A value an older record lacks is undefined, shown as
``—``. The stage's ``show`` module may add:

* ``blog_values(record) -> dict``: what its templates show that is derived rather than
  recorded (groupings, commands, table cells cut short), no text of its own;
* ``blog_figures(record) -> dict[str, Callable[[], Optional[Figure]]]``: figure name
  -> a function drawing it as a bare ``matplotlib.figure.Figure`` (None when the record
  holds nothing to draw). The report writes ``figures/<name>.png``, redrawn only when
  the record is newer, and lists it in ``figures``; names are file names, unique
  across stages;
* ``blog_facts(record) -> dict``: run-wide facts other sections and the title use
  (``device``: the backend the run used; ``model_folder``: the model folder the stages
  loaded; ``cards``: the cards they used on this host); the first stage's value is kept;
* ``blog_notes(record) -> list[str]``: recorded notes that qualify the stage's figures,
  quoted among the caveats;
"""
