"""What a stage gives the report: its index card, its draft section, its figures.

The report knows no stage by name: it calls the functions below that the stage's
``hyport_lib.<name>.show`` module defines; a stage without them gets its recorded
headline as a table. ``record`` is ``results/NN_name.json`` as a
:class:`hyport_lib.results.StageRecord` whose ``data`` is the stage's ``RESULT``, read
without trusting its shape (an older or odd record gives defaults, never an exception).
An exception in a function is shown in place of its output; it never stops the report.

* ``glance(record) -> list[tuple[str, str]]``: the index card's figures, values written
  with :func:`~hyport_lib.drafting.values.fmt_value`;
* ``glance_svg(record) -> str``: an inline SVG under them ("" for none);
* ``blog_values(record) -> dict``: what its templates show that is derived rather than
  recorded (groupings, commands, cells cut short), no text of its own;
* ``blog_figures(record) -> dict[str, Callable[[], Optional[Figure]]]``: file name (unique
  across stages) -> a function drawing a bare matplotlib ``Figure`` (None: nothing to
  draw); written as ``figures/<name>.png``, redrawn only when the record is newer;
* ``blog_facts(record) -> dict``: run-wide facts (``device``, ``model_folder``,
  ``cards``); the first stage's value is kept;
* ``blog_notes(record) -> list[str]``: notes that qualify its figures, quoted among the
  caveats.

A stage's draft part is one Jinja template beside its ``show`` module, ``blog.md.j2``,
imported by the frame (``report/templates/blog/blog.md.j2``) with ``host``,
``parameters``, ``versions``, ``facts``, ``figures`` (name -> relative path) and the
shared macros (``item``, ``value_word``, ``result_word``, ``value``, ``yes_no``,
``prov``). It defines ``title()``; ``section(r, x)`` (the record as written, a mapping,
and its ``blog_values``; called only when the stage finished and recorded data, after the
report's heading, verdict, provenance and summary); and optionally
``appendix(r, x, in_run)``, a section of its own after the stages' (``r`` None without
data, ``in_run`` False when the run left the stage out). Its sentences are English, each
one ``_("... %(name)s ...", name=value)`` (``pgettext`` where one English word says two
things); the Chinese of each is in the gettext catalogue ``blog.zh.po`` beside the
template, so adding a stage is adding files. Recorded texts go through the filters of
:mod:`~hyport_lib.drafting.templates`, numbers through ``num``: a test checks every
number of a draft against the recorded files, that no template sentence holds a digit,
that every sentence has its Chinese with the same values, and the Chinese draft for
English prose.
"""
