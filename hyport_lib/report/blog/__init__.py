"""The blog-post drafts of a run (``blog.en.md``, ``blog.zh.md``) and their figures.

:mod:`~hyport_lib.report.blog.writer` writes them; :mod:`~hyport_lib.report.blog.context`
holds what they are written from, :mod:`~hyport_lib.report.blog.text` the frame's
sentences, :mod:`~hyport_lib.report.blog.frame` and
:mod:`~hyport_lib.report.blog.sections` the parts, :mod:`~hyport_lib.report.blog.figures`
the PNG files. Each stage draws its own section and figures (:mod:`hyport_lib.drafting`).
"""
