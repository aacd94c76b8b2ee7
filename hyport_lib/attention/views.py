"""Parts of stage 02 as the notebook and the report both tell them (an older or half-written
record gives what it holds)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Optional

from hyport_lib.attention.compare import error_ratio
from hyport_lib.attention.stage import AttentionStageResult
from hyport_lib.drafting.values import num
from hyport_lib.port.tree import PortResult
from hyport_lib.proof.behaviour import Behaviour, PairResult
from hyport_lib.proof.port_record import PortProof
from hyport_lib.results import VERDICTS, worst_verdict
from hyport_lib.utils.printable import shortened

#: Longest answer shown in a table cell (the record keeps the whole answer).
ANSWER_CHARS = 160
PROOF_COLUMNS = ("name", "kind", "verdict", "max_abs", "bound", "cosine", "npu_calls",
                 "tokens_match", "detail")


# --- the behaviour --------------------------------------------------------------------
def _difference(pair: PairResult) -> str:
    if pair.not_compared:
        return pair.not_compared
    if pair.identical:
        return ""
    diff = pair.first_difference or {}
    return (f"prompt {diff.get('prompt')}, token {diff.get('token')}: "
            f"{diff.get('eager')!r} → {diff.get('swapped')!r}")


def _answers(answers: list[str]) -> list[str]:
    return [shortened(answer, ANSWER_CHARS) for answer in answers]


def behaviour_frame(behaviour: Behaviour):
    """One row per prompt: eager's answer and each swapped model's."""
    import pandas as pd

    columns = {"eager": _answers(behaviour.eager_answers),
               **{pair.label: _answers(pair.answers) for pair in behaviour.pairs}}
    return pd.DataFrame([{"prompt": prompt, **{name: answers[index] if index < len(answers) else ""
                                               for name, answers in columns.items()}}
                         for index, prompt in enumerate(behaviour.prompts)])


def pairs_frame(behaviour: Behaviour):
    """One row per swapped model: identical answers, the first difference, perplexities."""
    import pandas as pd

    return pd.DataFrame([{"swapped": p.label, "dtype": p.dtype, "identical": None if p.not_compared else p.identical,
                          "first difference": _difference(p), "eager perplexity": p.eager_perplexity,
                          "swapped perplexity": p.perplexity} for p in behaviour.pairs])


def behaviour_markdown(behaviour: Optional[Behaviour]) -> str:
    if behaviour is None:
        return "Behaviour was not compared (a record made before this check existed)."
    if not behaviour.meaningful:
        return f"**Behaviour**: {behaviour.why}."
    return (f"**Behaviour on real weights**: greedy answers of {behaviour.new_tokens} new tokens "
            f"and the perplexity of a fixed text, each swapped model against eager in the same dtype "
            f"(mean probability of eager's greedy token {num(behaviour.top1_probability)}).")


def behaviour_glance_row(behaviour: Optional[Behaviour]) -> list[tuple[str, str]]:
    if behaviour is None:
        return []
    if not behaviour.meaningful:
        return [("behaviour", behaviour.why)]
    said = [f"{p.label}: " + ("identical" if p.identical else _difference(p)) for p in behaviour.pairs]
    return [("behaviour", f"{behaviour.new_tokens}-token answers: " + "; ".join(said))]


def behaviour_values(behaviour: Optional[Behaviour]) -> dict:
    """For the drafts: each prompt with eager's answer cut short, each swapped model with
    its first difference."""
    if behaviour is None:
        return {"answers": [], "pairs": []}
    answers = _answers(behaviour.eager_answers)
    return {"answers": [(p, answers[i] if i < len(answers) else "") for i, p in enumerate(behaviour.prompts)],
            "pairs": [(p, _difference(p)) for p in behaviour.pairs]}


# --- the port -------------------------------------------------------------------------
def proof_frame(proof: PortProof):
    import pandas as pd

    return pd.DataFrame([{c: getattr(case, c) for c in PROOF_COLUMNS} for case in proof.cases],
                        columns=list(PROOF_COLUMNS))


def proof_markdown(proof: PortProof) -> str:
    """The proof's verdict and what was compared with what."""
    if proof.error:
        return f"**Proof {proof.verdict}**: {proof.error}"
    lines = [f"**Proof {proof.verdict}**: `{proof.model_class}` ({proof.model_kind}), tiny random "
             f"weights, {proof.dtype} on {proof.device}", "",
             f"- reference: {proof.reference}",
             f"- port: {proof.ported_path}"]
    lines += [f"- note: {n}" for n in proof.notes]
    return "\n".join(lines)


def port_glance_rows(result: AttentionStageResult) -> list[tuple[str, str]]:
    if result.port_error:
        return [("port", f"not made: {result.port_error}")]
    port = result.port
    if port is None:
        return []
    proof = port.proof
    said = f"proof {proof.verdict}" + (" (emulated)" if proof.emulated else "") if proof else "nothing to prove"
    return [("port", f"{len(port.changes)} changes, {len(port.manual)} left for a human, {said}")]


def port_kinds(port: Optional[PortResult]) -> list[tuple[str, int]]:
    return sorted(Counter(str(change.kind) for change in port.changes).items()) if port else []


# --- the rows -------------------------------------------------------------------------
def case_tally(frame) -> tuple[int, int, Optional[dict]]:
    """``(cases passed, cases, worst row)``: a case passes when every implementation passed
    it; the worst row has the largest ``max_abs / bound`` (None when no row was judged)."""
    verdicts = frame.groupby(frame["case"].astype(str), sort=False)["verdict"]
    passed = int(verdicts.apply(lambda v: bool((v == "PASS").all())).sum())
    ratio = error_ratio(frame)
    worst = frame.loc[ratio.idxmax()].to_dict() if ratio.notna().any() else None
    return passed, verdicts.ngroups, worst


def backend_rows(frame, by=("backend",)) -> list[dict]:
    """Per implementation (or per ``by`` columns), in the recorded order: where it ran and its
    rows' figures (a non-finite output counts as an infinite ``max_abs``)."""
    import pandas as pd

    frame = frame[frame["backend"].notna() & (frame["backend"] != "")]
    # NaN / Inf in the output: its max_abs was recorded as null
    value = pd.to_numeric(frame["max_abs"], errors="coerce").mask(frame["finite"].eq(False), math.inf)
    bound = pd.to_numeric(frame["bound"], errors="coerce")
    frame = frame.assign(value=value, share=value / bound.where(bound != 0))
    out = []
    for keys, group in frame.groupby(list(by), sort=False):
        counts = group["verdict"].value_counts()
        source = group["source"].iloc[0]
        out.append({"source": None if pd.isna(source) else source, **dict(zip(by, keys)), "rows": len(group),
                    **{v: int(counts.get(v, 0)) for v in VERDICTS}, "max_abs": _largest(group["value"]),
                    "ratio": _largest(group["share"]), "min cosine": group["cosine"].min(),
                    "verdict": worst_verdict(group["verdict"])})
    return out


def _largest(values) -> Optional[float]:
    return None if values.isna().all() else float(values.max())
