"""The context a stage's draft section is written in: :class:`Draft`.

The report builds one :class:`Draft` per language and hands it, with the stage's own
recorded result, to the stage's ``blog_section(record, draft)`` (see
:mod:`hyport_lib.drafting`). It carries what a section may need beyond its own record:
the language and the words every section shares (table headers, yes / no, where
figures came from), the figures drawn for the run, the run's host, parameters and
package versions, and the facts other stages established (``blog_facts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hyport_lib.drafting.markdown import recorded
from hyport_lib.drafting.values import is_number, num

#: The languages of the drafts.
LANGS = ("en", "zh")

#: Words shared by the stages' sections and the report's frame, per language. No
#: sentence holds a digit of its own: every number a draft shows has a recorded source.
WORDS = {
    "en": {
        "item": "Item", "value": "Value", "result": "Result", "yes": "yes", "no": "no",
        "prov": {"npu": "measured on an NPU",
                 "cuda": "measured on a CUDA GPU, not on an NPU",
                 "cpu": "measured on the CPU, not on an NPU",
                 "emulated": "computed by hyport's emulation of the NPU operator on {device}, "
                             "not measured on an NPU",
                 "unknown": "not recorded"},
    },
    "zh": {
        "item": "项目", "value": "数值", "result": "结果", "yes": "是", "no": "否",
        "prov": {"npu": "在 NPU 上实测",
                 "cuda": "在 CUDA GPU 上测得，并非 NPU 实测",
                 "cpu": "在 CPU 上测得，并非 NPU 实测",
                 "emulated": "由 hyport 在 {device} 上仿真 NPU 算子计算得到，并非 NPU 实测",
                 "unknown": "未记录"},
    },
}


def check_lang(lang: str) -> str:
    """``lang`` when there are drafts in it.

    Raises:
        ValueError: naming the languages there are.
    """
    if lang not in LANGS:
        raise ValueError(f"lang={lang!r}: expected one of {', '.join(LANGS)}")
    return lang


@dataclass
class Draft:
    """What a stage's draft section gets besides its own record.

    Attributes:
        lang: ``en`` or ``zh``; a section writes its fixed sentences in it.
        figures: figure name -> path relative to the draft, for every figure drawn for
            this run (a section links its own: ``![...](draft.figures["loss"])``).
        facts: run-wide facts the stages established through their ``blog_facts``,
            the first stage's value kept (``device``, ``model_folder``).
        host: the host the run ran on.
        parameters: the run's parameters (profile and ``-p``), secret values hidden.
        versions: package name -> version as the runner recorded them.
    """

    lang: str
    figures: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    host: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        check_lang(self.lang)

    @property
    def words(self) -> dict:
        """The shared words (:data:`WORDS`) of the draft's language."""
        return WORDS[self.lang]

    def phrases(self, own: dict[str, dict]) -> dict:
        """A stage's own fixed sentences (language -> key -> text) in the draft's
        language, on top of the shared words."""
        return {**self.words, **own[self.lang]}

    def yes_no(self, value: Any) -> str:
        return self.words["yes"] if value else self.words["no"]

    def value(self, value: Any) -> str:
        """A recorded value for a table: numbers by :func:`~hyport_lib.drafting.values.num`,
        yes / no, texts as recorded (marked as code in Chinese)."""
        if isinstance(value, bool):
            return self.yes_no(value)
        if is_number(value) or value is None:
            return num(value)
        return recorded(value, self.lang)

    def prov(self, provenance: Optional[dict]) -> str:
        """Where a stage's figures came from, in words (never an NPU for CPU figures)."""
        words = self.words["prov"]
        provenance = provenance if isinstance(provenance, dict) else {}
        device = str(provenance.get("device") or "")
        if provenance.get("emulated"):
            return words["emulated"].format(device=device.upper() or "?")
        return words.get(device, words["unknown"])
