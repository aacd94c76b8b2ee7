"""Node 0's token in the folder the nodes of a job share (stage 04's ``output_dir``, stage 03's
``log_dir``): a node that does not read node 0's token there does not share the folder, and
what it writes would never reach node 0.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Optional

from hyport_lib.utils.bounded_files import UnreadableFile, read_text
from hyport_lib.utils.files import atomic_write_text

TOKEN_FILE = ".hyport_node0_token"
#: A token is 32 hex digits: anything much longer is not one.
MAX_TOKEN_BYTES = 4096


def token_path(folder: os.PathLike) -> Path:
    return Path(folder) / TOKEN_FILE


def write_token(folder: os.PathLike) -> str:
    """Node 0: a fresh random token in ``folder`` (the other nodes look for it there)."""
    token = secrets.token_hex(16)
    atomic_write_text(token_path(folder), token + "\n")
    return token


def read_token(folder: os.PathLike) -> Optional[str]:
    """Node 0's token as this node reads it; None where none reads as one (absent, a FIFO, a
    link out of ``folder``, too large): never waited on."""
    try:
        return read_text(token_path(folder), MAX_TOKEN_BYTES, folder=Path(folder)).strip() or None
    except UnreadableFile:
        return None
