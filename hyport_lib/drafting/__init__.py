"""What a stage gives the report: its index card, its draft section, its figures.

The report knows no stage by name: it calls these functions of the stage's ``show`` module
where it defines them, each given ``record`` (``results/NN_name.json`` read as its
``RESULT``, an odd record giving defaults, never an exception); a stage without them gets
its recorded headline as a table. An exception in one is shown in place of its output.

* ``glance(record) -> list[tuple[str, str]]``: the card's figures (values through
  :func:`~hyport_lib.drafting.values.fmt_value`); ``glance_svg(record) -> str``: an SVG under them;
* ``blog_values(record) -> dict``: what its templates show that is derived, not recorded;
* ``blog_figures(record) -> dict[str, Callable[[], Optional[Figure]]]``: file name (unique
  across stages) -> a function drawing a bare matplotlib ``Figure`` (None: nothing to draw);
* ``blog_facts(record) -> dict``: run-wide facts (``device``, ``cards``), the first stage's kept;
* ``blog_notes(record) -> list[str]``: notes that qualify its figures, among the caveats.

A stage's draft part is one Jinja template beside its ``show`` module, ``blog.md.j2``,
imported by the frame (``report/templates/blog/blog.md.j2``) with its shared macros. It
defines ``title()``, ``section(r, x)`` (the record as written, a mapping, and its
``blog_values``; called only when the stage recorded data) and optionally
``appendix(r, x, in_run)`` (``r`` None without data, ``in_run`` False when the run left the
stage out). Each sentence is English, ``_("... %(name)s ...", name=value)``; its Chinese is
in ``blog.zh.po`` beside the template. Recorded texts go through the filters of
:mod:`~hyport_lib.drafting.templates`, numbers through ``num``: a test checks every number
of a draft against the recorded files, that no template sentence holds a digit, and that
every sentence has its Chinese with the same values.
"""
