"""``port.diff``: a unified diff that ``git apply`` and ``patch -p1`` apply, fast on big files.

:class:`difflib.SequenceMatcher` is quadratic in the worst case (12 s for a 1 MB file with
a few hundred rewritten lines), so lines are matched the *patience* way: lines found once
on each side anchor the match, and only the short stretches between anchors go to
SequenceMatcher. Hunks are written exactly as :func:`difflib.unified_diff` writes them.
"""

from __future__ import annotations

import bisect
from collections import Counter
from difflib import SequenceMatcher
from typing import Optional

#: A stretch between anchors with more lines than this on both sides (no line in it is
#: unique) is written as replaced rather than matched line by line: still a correct
#: patch, and SequenceMatcher's cost stays bounded.
SMALL_STRETCH = 2000
CONTEXT = 3


def _longest_increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest run of ``pairs`` (sorted by their first item) whose second items rise."""
    tails: list[int] = []  # smallest second item ending a run of each length
    tail_index: list[int] = []
    previous: list[int] = []
    for index, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(tails, j)
        if k == len(tails):
            tails.append(j)
            tail_index.append(index)
        else:
            tails[k], tail_index[k] = j, index
        previous.append(tail_index[k - 1] if k else -1)
    run, index = [], tail_index[-1] if tail_index else -1
    while index >= 0:
        run.append(pairs[index])
        index = previous[index]
    return run[::-1]


def _matched_pairs(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """(i, j) of each line of ``a`` matched with line j of ``b``, rising in both."""
    pairs: list[tuple[int, int]] = []
    stack = [(0, len(a), 0, len(b))]
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        while alo < ahi and blo < bhi and a[alo] == b[blo]:
            pairs.append((alo, blo))
            alo, blo = alo + 1, blo + 1
        while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
            ahi, bhi = ahi - 1, bhi - 1
            pairs.append((ahi, bhi))
        if alo == ahi or blo == bhi:
            continue
        count_a, count_b = Counter(a[alo:ahi]), Counter(b[blo:bhi])
        where_b = {b[j]: j for j in range(blo, bhi) if count_b[b[j]] == 1}
        anchors = _longest_increasing([(i, where_b[a[i]]) for i in range(alo, ahi)
                                       if count_a[a[i]] == 1 and a[i] in where_b])
        if anchors:
            pairs += anchors
            bounds = [(alo - 1, blo - 1), *anchors, (ahi, bhi)]
            stack += [(i1 + 1, i2, j1 + 1, j2) for (i1, j1), (i2, j2) in zip(bounds, bounds[1:])]
        elif ahi - alo <= SMALL_STRETCH or bhi - blo <= SMALL_STRETCH:
            matcher = SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            pairs += [(alo + i + k, blo + j + k) for i, j, size in matcher.get_matching_blocks()
                      for k in range(size)]
    return sorted(pairs)


def _matching_blocks(a: list[str], b: list[str]) -> list[tuple[int, int, int]]:
    blocks: list[list[int]] = []
    for i, j in _matched_pairs(a, b):
        if blocks and blocks[-1][0] + blocks[-1][2] == i and blocks[-1][1] + blocks[-1][2] == j:
            blocks[-1][2] += 1
        else:
            blocks.append([i, j, 1])
    return [tuple(block) for block in blocks] + [(len(a), len(b), 0)]


def _range(start: int, stop: int) -> str:
    """A hunk's range as unified diffs write it (difflib's own rule)."""
    beginning, length = start + 1, stop - start
    if length == 1:
        return f"{beginning}"
    if not length:
        beginning -= 1  # an empty range starts before the first line
    return f"{beginning},{length}"


def unified_lines(a: list[str], b: list[str], fromfile: str, tofile: str) -> list[str]:
    """What ``difflib.unified_diff(a, b, fromfile, tofile)`` yields, matched as above."""
    matcher = SequenceMatcher(None, [], [])
    matcher.a, matcher.b = a, b
    matcher.matching_blocks, matcher.opcodes = _matching_blocks(a, b), None
    out: list[str] = []
    for group in matcher.get_grouped_opcodes(CONTEXT):
        if not out:
            out += [f"--- {fromfile}\n", f"+++ {tofile}\n"]
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in a[i1:i2]]
                continue
            if tag in ("replace", "delete"):
                out += ["-" + line for line in a[i1:i2]]
            if tag in ("replace", "insert"):
                out += ["+" + line for line in b[j1:j2]]
    return out


def file_diff(rel: str, before: Optional[str], after: str) -> str:
    """The unified diff of one file (``a/`` = source, ``b/`` = port; a new file from
    ``/dev/null``), lines split at ``\\n`` only: a form feed or U+2028 inside a line is
    not a line end to ``patch``."""
    def lines(text: str) -> list[str]:
        parts = text.split("\n")
        out = [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n\\ No newline at end of file\n"
        return out

    return "".join(unified_lines(lines(before or ""), lines(after),
                                 "/dev/null" if before is None else f"a/{rel}", f"b/{rel}"))
