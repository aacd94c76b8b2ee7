"""The model check's behaviour part (:mod:`hyport_lib.attention.behaviour`) as stage 02
tells it: a table of answers for the notebook, the index card's line and what the
drafts' paragraph shows. Compute lives in ``behaviour.py``."""

from __future__ import annotations

from typing import Optional

from hyport_lib.attention.behaviour import Behaviour, PairResult
from hyport_lib.drafting.values import num
from hyport_lib.utils.printable import shortened

#: Longest answer shown in a table cell (the record keeps the whole answer).
ANSWER_CHARS = 160


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


def glance_row(behaviour: Optional[Behaviour]) -> list[tuple[str, str]]:
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
