"""Parts of stage 02 as the notebook and the report tell them: the behaviour's answers
(computed in :mod:`~hyport_lib.proof.behaviour`), the port's proof as a table and in
words (computed in :mod:`hyport_lib.proof.port`), the index card's lines, and tallies of the
recorded rows (``data.rows``; an older or half-written record gives what it holds)."""

from __future__ import annotations

import math
from typing import Optional

from hyport_lib.attention.stage import AttentionRecord
from hyport_lib.drafting.values import as_dict, as_list, is_number, num
from hyport_lib.proof.behaviour import Behaviour, PairResult
from hyport_lib.utils.printable import shortened

#: Longest answer shown in a table cell (the record keeps the whole answer).
ANSWER_CHARS = 160
PROOF_COLUMNS = ("name", "kind", "verdict", "max_abs", "bound", "cosine", "npu_calls",
                 "tokens_match", "detail")
_VERDICTS = ("PASS", "WARN", "FAIL", "SKIP")


# --- the behaviour --------------------------------------------------------------------
def _difference(pair: PairResult) -> str:
    if pair.identical:
        return ""
    diff = pair.first_difference or {}
    return (f"prompt {diff.get('prompt')}, token {diff.get('token')}: "
            f"{diff.get('eager')!r} → {diff.get('swapped')!r}")


def _answers(answers: list[str]) -> list[str]:
    return [shortened(answer, ANSWER_CHARS) for answer in answers]


def behaviour_frame(behaviour: Behaviour):
    """One row per prompt: eager's answer and each swapped model's, and whether they agree."""
    import pandas as pd

    columns = {"eager": _answers(behaviour.eager_answers),
               **{pair.label: _answers(pair.answers) for pair in behaviour.pairs}}
    return pd.DataFrame([{"prompt": prompt, **{name: answers[index] if index < len(answers) else ""
                                               for name, answers in columns.items()}}
                         for index, prompt in enumerate(behaviour.prompts)])


def pairs_frame(behaviour: Behaviour):
    """One row per swapped model: identical answers, the first difference, perplexities."""
    import pandas as pd

    return pd.DataFrame([{"swapped": p.label, "dtype": p.dtype, "identical": p.identical,
                          "first difference": _difference(p), "eager perplexity": p.eager_perplexity,
                          "swapped perplexity": p.perplexity} for p in behaviour.pairs])


def behaviour_markdown(behaviour: Optional[Behaviour]) -> str:
    """The notebook's heading line for the behaviour part."""
    if behaviour is None:
        return "Behaviour was not compared (a record made before this check existed)."
    if not behaviour.meaningful:
        return f"**Behaviour**: {behaviour.why}."
    return (f"**Behaviour on real weights**: greedy answers of {behaviour.new_tokens} new tokens "
            f"and the perplexity of a fixed text, each swapped model against eager in the same dtype "
            f"(mean probability of eager's greedy token {num(behaviour.top1_probability)}).")


def behaviour_glance_row(behaviour: Optional[Behaviour]) -> list[tuple[str, str]]:
    """The index card's behaviour line (none for a record without the part)."""
    if behaviour is None:
        return []
    if not behaviour.meaningful:
        return [("behaviour", behaviour.why)]
    said = [f"{p.label}: " + ("identical" if p.identical else _difference(p)) for p in behaviour.pairs]
    return [("behaviour", f"{behaviour.new_tokens}-token answers: " + "; ".join(said))]


def behaviour_values(behaviour: Optional[Behaviour]) -> dict:
    """What the drafts show of the behaviour beside its record: each prompt with eager's
    answer cut short, each swapped model with its first difference."""
    if behaviour is None:
        return {"answers": [], "pairs": []}
    answers = _answers(behaviour.eager_answers)
    return {"answers": [(p, answers[i] if i < len(answers) else "") for i, p in enumerate(behaviour.prompts)],
            "pairs": [(p, _difference(p)) for p in behaviour.pairs]}


# --- the port -------------------------------------------------------------------------
def proof_frame(proof: dict):
    """The proof's cases as a DataFrame (one row per input case)."""
    import pandas as pd

    return pd.DataFrame([{c: case.get(c) for c in PROOF_COLUMNS} for case in proof.get("cases") or []],
                        columns=list(PROOF_COLUMNS))


def proof_markdown(proof: dict) -> str:
    """The proof's verdict and what was compared with what, as Markdown."""
    if proof.get("error"):
        return f"**Proof {proof.get('verdict')}**: {proof['error']}"
    lines = [f"**Proof {proof.get('verdict')}**: `{proof.get('model_class')}` "
             f"({proof.get('model_kind')}), tiny random weights, {proof.get('dtype')} on "
             f"{proof.get('device')}", "",
             f"- reference: {proof.get('reference')}",
             f"- port: {proof.get('ported_path')}"]
    lines += [f"- note: {n}" for n in proof.get("notes") or []]
    return "\n".join(lines)


def port_glance_rows(attention: AttentionRecord) -> list[tuple[str, str]]:
    """The index card's line for the port, when one was made."""
    if attention.port_error:
        return [("port", f"not made: {attention.port_error}")]
    port = attention.port
    if port is None:
        return []
    proof = as_dict(port.get("proof"))
    said = f"proof {proof.get('verdict')}" + (" (emulated)" if proof.get("emulated") else "") \
        if proof else "nothing to prove"
    return [("port", f"{len(as_list(port.get('changes')))} changes, "
                     f"{len(as_list(port.get('manual')))} left for a human, {said}")]


def port_kinds(port: dict) -> list[tuple[str, int]]:
    """The port's changes by kind, for the drafts' table."""
    kinds: dict[str, int] = {}
    for change in as_list(port.get("changes")):
        if isinstance(change, dict):
            kinds[str(change.get("kind"))] = kinds.get(str(change.get("kind")), 0) + 1
    return sorted(kinds.items())


# --- the recorded rows ----------------------------------------------------------------
def case_tally(rows: list[dict]) -> tuple[int, int, Optional[dict]]:
    """``(cases passed, cases, worst row)``: a case passes when every implementation passed
    it; the worst row has the largest ``max_abs / bound`` (None when no row was judged)."""
    by_case: dict[str, list[dict]] = {}
    for r in rows:
        by_case.setdefault(str(r.get("case")), []).append(r)
    passed = sum(1 for case in by_case.values() if all(r.get("verdict") == "PASS" for r in case))
    judged = [r for r in rows if r.get("bound") and r.get("max_abs") is not None]
    worst = max(judged, key=lambda r: r["max_abs"] / r["bound"], default=None)
    return passed, len(by_case), worst


def backend_rows(rows: list[dict]) -> list[dict]:
    """Per implementation, in the recorded order: where it ran, its rows per verdict, its
    largest ``max_abs`` and its worst ``max_abs / bound``."""
    out: dict[str, dict] = {}
    for r in rows:
        if not isinstance(r, dict) or not r.get("backend"):
            continue
        entry = out.setdefault(r["backend"], {"name": r["backend"], "source": r.get("source"),
                                              "rows": 0, "max_abs": None, "ratio": None,
                                              **{v: 0 for v in _VERDICTS}})
        entry["rows"] += 1
        if r.get("verdict") in _VERDICTS:
            entry[r["verdict"]] += 1
        value, bound = r.get("max_abs"), r.get("bound")
        if r.get("finite") is False:  # NaN / Inf in the output (its max_abs was recorded as null)
            value = math.inf
        if is_number(value):
            entry["max_abs"] = value if entry["max_abs"] is None else max(entry["max_abs"], value)
            if is_number(bound) and bound:
                share = value / bound
                entry["ratio"] = share if entry["ratio"] is None else max(entry["ratio"], share)
    return list(out.values())
