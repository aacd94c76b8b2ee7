"""Static port scan: where a source tree still assumes CUDA, flash-attn or NCCL.

The seed port's last check was "neither the code nor the requirements mention
flash_attn any more"; this package makes that check (and its siblings) repeatable.
Python files are read through the AST, dependency files line by line, and each
finding comes with the line, the category and what to write instead on Ascend.

What is found, and why prose is not: see ``python_code`` (the AST rules) and
``dependencies`` (requirements*.txt, pyproject.toml, setup.py, setup.cfg,
environment*.yml, ``pip install`` lines of *.sh / Dockerfiles). Code whose job is a CUDA
call (a backend seam) marks the line with a ``hyport-scan: ignore`` comment, or the
file with ``hyport-scan: ignore-file`` in its first ten lines.

Entry point: :func:`hyport_lib.scan.scanner.scan_path`; results in :mod:`.model`, display in
:mod:`.show`.
"""
