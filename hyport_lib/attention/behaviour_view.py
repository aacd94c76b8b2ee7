"""The model check's behaviour part (:mod:`hyport_lib.attention.behaviour`) as stage 02
tells it: a table of answers for the notebook, the index card's line and what the
drafts' paragraph shows. Compute lives in ``behaviour.py``."""

from __future__ import annotations

from typing import Optional

from hyport_lib.drafting.values import as_dict, as_list, num
from hyport_lib.utils.printable import shortened

#: Longest answer shown in a table cell (the record keeps the whole answer).
ANSWER_CHARS = 160


def _difference(pair: dict) -> str:
    if pair.get("identical"):
        return ""
    diff = as_dict(pair.get("first_difference"))
    return (f"prompt {diff.get('prompt')}, token {diff.get('token')}: "
            f"{diff.get('eager')!r} → {diff.get('swapped')!r}")


def behaviour_frame(behaviour: Optional[dict]):
    """One row per prompt: eager's answer and each swapped model's, and whether they agree."""
    import pandas as pd

    behaviour = as_dict(behaviour)
    pairs = [as_dict(p) for p in as_list(behaviour.get("pairs"))]
    columns = {"eager": as_list(behaviour.get("eager_answers")),
               **{pair.get("label"): as_list(pair.get("answers")) for pair in pairs}}
    rows = []
    for index, prompt in enumerate(as_list(behaviour.get("prompts"))):
        rows.append({"prompt": prompt,
                     **{name: shortened(answers[index], ANSWER_CHARS) if index < len(answers) else ""
                        for name, answers in columns.items()}})
    return pd.DataFrame(rows)


def pairs_frame(behaviour: Optional[dict]):
    """One row per swapped model: identical answers, the first difference, perplexities."""
    import pandas as pd

    return pd.DataFrame([{"swapped": p.get("label"), "dtype": p.get("dtype"),
                          "identical": p.get("identical"), "first difference": _difference(p),
                          "eager perplexity": p.get("eager_perplexity"),
                          "swapped perplexity": p.get("perplexity")}
                         for p in map(as_dict, as_list(as_dict(behaviour).get("pairs")))])


def behaviour_markdown(behaviour: Optional[dict]) -> str:
    """The notebook's heading line for the behaviour part."""
    behaviour = as_dict(behaviour)
    if not behaviour:
        return "Behaviour was not compared (a record made before this check existed)."
    if not behaviour.get("meaningful"):
        return f"**Behaviour**: {behaviour.get('why')}."
    return (f"**Behaviour on real weights**: greedy answers of {behaviour.get('new_tokens')} new tokens "
            f"and the perplexity of a fixed text, each swapped model against eager in the same dtype "
            f"(mean probability of eager's greedy token {num(behaviour.get('top1_probability'))}).")


def glance_row(model: dict) -> list[tuple[str, str]]:
    """The index card's behaviour line (none for a record without the part)."""
    behaviour = as_dict(model.get("behaviour"))
    if not behaviour:
        return []
    if not behaviour.get("meaningful"):
        return [("behaviour", str(behaviour.get("why")))]
    said = [f"{p.get('label')}: " + ("identical" if p.get("identical") else _difference(p))
            for p in map(as_dict, as_list(behaviour.get("pairs")))]
    return [("behaviour", f"{behaviour.get('new_tokens')}-token answers: " + "; ".join(said))]


def behaviour_values(behaviour: Optional[dict]) -> dict:
    """What the drafts show of the behaviour beside its record: each prompt with eager's
    answer cut short, each swapped model with its first difference."""
    behaviour = as_dict(behaviour)
    answers = as_list(behaviour.get("eager_answers"))
    pairs = [as_dict(p) for p in as_list(behaviour.get("pairs"))]
    return {"answers": [(p, shortened(answers[i], ANSWER_CHARS) if i < len(answers) else "")
                        for i, p in enumerate(as_list(behaviour.get("prompts")))],
            "pairs": [(p, _difference(p)) for p in pairs]}
