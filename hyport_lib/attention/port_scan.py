"""The static scan of the attention stage: what in a code base still assumes CUDA / flash-attn.

The scan itself is :mod:`hyport_lib.scan`; this module feeds it a path, or a small
planted model file when none is given.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hyport_lib.scan.model import ScanReport
from hyport_lib.scan.scanner import scan_path

PLANTED_EXAMPLE = '''\
"""A model file as it often arrives from a CUDA codebase (planted by hyport)."""
import torch
from flash_attn import flash_attn_func, flash_attn_varlen_func
from flash_attn.bert_padding import pad_input, unpad_input


class Attention(torch.nn.Module):
    def forward(self, q, k, v, cu_seqlens=None, max_seqlen=None):
        if cu_seqlens is not None:
            return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens,
                                          max_seqlen, max_seqlen, causal=True)
        return flash_attn_func(q, k, v, causal=True)


def load(path):
    model = torch.load(path).cuda()
    torch.cuda.synchronize()
    return model.to("cuda")
'''
PLANTED_REQUIREMENTS = "torch\nflash-attn==2.6.3\ntransformers\n"


def planted_example(directory=None) -> Path:
    """Write the planted example (a model file + requirements) and return its folder."""
    # A fixed folder, rewritten on each call: runs do not pile up temporary folders.
    folder = Path(directory) if directory else Path(tempfile.gettempdir()) / "hyport-planted-example"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "modeling_example.py").write_text(PLANTED_EXAMPLE, encoding="utf-8")
    (folder / "requirements.txt").write_text(PLANTED_REQUIREMENTS, encoding="utf-8")
    return folder


def run_scan(code_path: str = "") -> tuple[ScanReport, str]:
    """Scan ``code_path`` (empty: the planted example, written first) with
    :func:`hyport_lib.scan.scanner.scan_path`; returns the report and what was scanned."""
    path = str(code_path or "").strip() or str(planted_example())
    return scan_path(path), path
