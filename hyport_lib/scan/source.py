"""Source text helpers shared by the scanners, and the line scan for unparsable files."""

from __future__ import annotations

import re
import tokenize
from io import BytesIO
from typing import Optional

from hyport_lib.scan import rules
from hyport_lib.scan.model import Hit, make_snippet

_LINE_SPLIT_RE = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Lines as the Python tokenizer counts them (form feeds etc. are not line breaks)."""
    return _LINE_SPLIT_RE.split(text)


def decode_source(data: bytes) -> tuple[str, Optional[str]]:
    """Decode Python source by its coding cookie; ``(text, error)``, text is always usable."""
    try:
        encoding, _ = tokenize.detect_encoding(BytesIO(data).readline)
        return data.decode(encoding), None
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        return data.decode("utf-8", errors="replace"), f"{type(exc).__name__}: {exc}"


def hit_at(rel: str, lines: list[str], line: int, col: int, category: str, suggestion: str) -> Hit:
    """A hit whose snippet is line ``line`` (1-based) of ``lines``."""
    source = lines[line - 1] if 0 < line <= len(lines) else ""
    return Hit(rel, line, col, category, make_snippet(source), suggestion)


# --- line scan, for files the parser rejects -------------------------------------------
FALLBACK_NOTE = " (line scan: the file does not parse)"
_FALLBACK_RULES = (
    (re.compile(r"^\s*(?:from|import)\s+((?:flash_attn\w*|apex|amp_C|xformers|triton|bitsandbytes)"
                r"(?:\.\w+)*)"),
     lambda m: (rules.module_category(m.group(1)), rules.suggestion_for(m.group(1)))),
    (re.compile(r"\.cuda\("), lambda m: (rules.CUDA_CALL, rules.CUDA_METHOD_SUGGESTION)),
    (re.compile(r"\btorch\.(?:backends\.)?cuda(?:\.\w+)*"),
     lambda m: (rules.CUDA_CALL, rules.suggestion_for(m.group(0)))),
    # "cuda", 'cuda:0', f"cuda:{rank}", "cuda:%d" % i, "cuda:" + str(i)
    (re.compile(r"""(?<!\w)[fF]?["']cuda(?::(?:\d*|\{[^}"']*\}|%[ds]))?["']"""),
     lambda m: (rules.CUDA_DEVICE, rules.DEVICE_SUGGESTION)),
    (re.compile(r"\.is_cuda\b"),
     lambda m: (rules.CUDA_DEVICE, rules.name_rule("is_cuda", attribute=True).suggestion)),
    (re.compile(r"""["']nccl["']"""), lambda m: (rules.NCCL, rules.NCCL_SUGGESTION)),
    (re.compile(r"""["']flash_attention_[23]["']"""),
     lambda m: (rules.FLASH_ATTN, rules.FLASH_IMPL_SUGGESTION)),
    (re.compile(rf"\b({rules.ENV_VAR_NAMES})\b"), lambda m: rules.env_var_rule(m.group(1))),
)


def line_scan(rel: str, lines: list[str]) -> list[Hit]:
    """Regex rules over code lines (comment lines skipped); one hit per rule and line."""
    hits = []
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("#"):
            continue
        for pattern, describe in _FALLBACK_RULES:
            match = pattern.search(line)
            if match:
                category, suggestion = describe(match)
                hits.append(hit_at(rel, lines, number, match.start(), category,
                                   suggestion + FALLBACK_NOTE))
    return sorted(set(hits))
