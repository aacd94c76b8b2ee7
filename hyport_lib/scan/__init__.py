"""Static port scan: where a source tree still assumes CUDA, flash-attn or NCCL.

Python files are read through the AST (:mod:`.python_code`), dependency files line by line
(:mod:`.dependencies`); each finding names the line, the category and what to write instead.
Code whose job is a CUDA call marks the line ``hyport-scan: ignore`` (the file:
``hyport-scan: ignore-file`` in its first ten lines). Entry: :func:`.scanner.scan_path`.
"""
