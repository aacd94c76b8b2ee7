"""What a stage gives the report: its index card, its draft section, its figures.

The report knows no stage by name: it calls the functions of the stage's ``show`` module
that CONTRIBUTING.md lists (``glance``, ``blog_values``, ``blog_figures``, ...), each given
the record read as its ``RESULT`` (an odd record gives defaults, never an exception); an
exception in one is shown in place of its output. The cards' values go through
:func:`~hyport_lib.drafting.values.fmt_value`; figure file names are unique across stages
(a drawing function may return None: nothing to draw); the first stage's ``blog_facts`` win.

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
