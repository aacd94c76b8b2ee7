"""The blog-post drafts of a run and their figures: written by
:mod:`~hyport_lib.report.blog.writer`; each stage draws its own part (:mod:`hyport_lib.drafting`).
"""
