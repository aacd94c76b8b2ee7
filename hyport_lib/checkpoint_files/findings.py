"""What the weight verifier can find: one :class:`Finding` per problem, of a class of
:data:`CLASSES` (stable: tests and scripts match it). Checks never raise for what they find
in a checkpoint: they add findings, and the table, the verdict and ``hyport verify``'s exit
status read that one list. Severities: ``error`` (not what it claims to be: the stage FAILs,
``hyport verify`` exits 1), ``warning`` (worth a look, may be intended: WARN), ``info``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Iterable

from hyport_lib.utils.typed_records import from_mapping

if TYPE_CHECKING:
    import pandas as pd

SEVERITIES = ("error", "warning", "info")

#: Every finding class, its severity and what it means (docs/weights.md lists them too).
CLASSES: dict[str, tuple[str, str]] = {
    # files and headers
    "no_weights": ("error", "no safetensors weights where weights were expected"),
    "file_unreadable": ("error", "a weight file could not be read (permissions, I/O error)"),
    "truncated_shard": ("error", "the file ends before the data its header describes"),
    "header_length_beyond_file": ("error", "the 8-byte header length points past the end of the file"),
    "header_too_large": ("error", "the header is larger than safetensors' 100 MB limit"),
    "header_not_json": ("error", "the header is not UTF-8 JSON holding an object"),
    "header_bad_entry": ("error", "a tensor entry lacks or mistypes dtype, shape or data_offsets"),
    "offsets_overlap": ("error", "two tensors claim the same bytes"),
    "offsets_out_of_bounds": ("error", "a tensor's data_offsets are reversed or past the data"),
    "offsets_not_covering": ("error", "bytes of the data buffer belong to no tensor (gap or trailing bytes)"),
    "size_mismatch": ("error", "dtype x shape does not match the tensor's byte length"),
    "safetensors_rejects": ("error", "safetensors itself refuses to open the file"),
    # the index
    "index_missing": ("error", "shard files without a model.safetensors.index.json"),
    "index_unreadable": ("error", "the index is not JSON with a weight_map"),
    "shard_missing": ("error", "the index names a shard that is not in the folder"),
    "key_missing_from_shard": ("error", "a key of the index is not in the shard the index names"),
    "key_not_in_index": ("error", "a key of a shard is not in the index (it would not be loaded)"),
    "key_in_two_shards": ("error", "a key is stored in two shards"),
    "weight_missing": ("error", "a weight of the model class is in no file (it would load at random)"),
    "extra_shard": ("warning", "a weight file in the folder that the index does not name"),
    "index_ignored": ("warning", "an index beside model.safetensors: from_pretrained loads only model.safetensors"),
    "total_size_mismatch": ("warning", "metadata.total_size (or total_parameters) differs from the headers"),
    # contents
    "zero3_placeholder": ("error", "a floating tensor with no elements: a ZeRO-3 placeholder saved as a weight"),
    "non_finite": ("error", "NaN or Inf values in a weight (full scan)"),
    "tied_duplicate": ("info", "a tied weight is saved under both names (as DeepSpeed saves do)"),
    # config.json
    "config_missing": ("error", "no config.json: the folder cannot be loaded as a model"),
    "config_unreadable": ("error", "config.json is not JSON, or names no model_type"),
    "model_class_unknown": ("warning", "the model class could not be built from config.json (names not "
                                       "mapped; from_pretrained will likely fail the same way)"),
    "config_suspect": ("warning", "a config.json field has a type transformers does not expect"),
    # reload
    "reload_skipped": ("info", "a reload or logits check was asked for one file, not a model folder"),
    "does_not_fit": ("warning", "a reload or logits check this host's RAM cannot hold: left out, with the figures"),
    "reload_failed": ("error", "from_pretrained failed in a fresh process"),
    "reload_missing_keys": ("error", "weights the model expects are missing (they would be random)"),
    "reload_mismatched_keys": ("error", "weights whose shape differs from what the model expects"),
    "reload_unexpected_keys": ("warning", "weights the model does not use"),
    "reload_class_fallback": ("warning", "config.json's architectures names a class this transformers "
                                         "lacks: the model was loaded from model_type instead"),
    "processor_failed": ("error", "the processor or tokenizer files do not load"),
    # comparisons
    "key_removed": ("warning", "a tensor of the base is not in the weights"),
    "base_mismatch": ("error", "the base shares under half of its tensors with the weights: another model"),
    "key_added": ("info", "a tensor of the weights is not in the base"),
    "shape_changed": ("warning", "a tensor's shape differs from the base"),
    "dtype_changed": ("info", "a tensor's dtype differs from the base (compared after rounding)"),
    "weights_unchanged": ("warning", "no tensor differs from the base: training changed nothing"),
    "checkpoint_differs": ("warning", "the checkpoint's weights differ from the weights checked"),
    "logits_differ": ("warning", "two folders that should hold the same model give different logits"),
    "compare_failed": ("error", "a comparison could not run"),
    "verify_stopped": ("error", "the verification was stopped before every check ran"),
    # DeepSpeed
    "zero_incomplete": ("error", "ZeRO optimizer-state files missing for some ranks"),
    "zero_unreadable": ("warning", "the ZeRO model-states file could not be read"),
    "zero_failed": ("error", "DeepSpeed's zero_to_fp32 could not consolidate the checkpoint"),
    "zero_mismatch": ("error", "consolidated fp32 weights, cast to the saved dtype, differ from the saved ones"),
    "zero_keys_differ": ("error", "the consolidated and the saved weights hold different names"),
}

FINDING_COLUMNS = ("severity", "class", "file", "message")


@dataclass
class Finding:
    """One problem (or note) about a checkpoint: ``file`` relative to the checkpoint folder
    when inside it, ``severity`` the class's unless given, ``tensors`` all those concerned
    (the message names a few)."""

    cls: str
    file: str
    message: str
    severity: str = ""
    tensors: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.cls not in CLASSES:
            raise ValueError(f"unknown finding class {self.cls!r}")
        self.severity = self.severity or CLASSES[self.cls][0]
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity={self.severity!r}: expected one of {', '.join(SEVERITIES)}")
        self.file, self.tensors = str(self.file), list(self.tensors)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["class"] = data.pop("cls")
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Finding":
        """A recorded finding: its class is written under ``class`` (see :meth:`to_dict`)."""
        fields = dict(data)
        fields["cls"] = fields.pop("class", None)
        return from_mapping(cls, fields)


def name_some(names: Iterable[str], limit: int = 3) -> str:
    """``a, b, c and 5 more``: a message names a few tensors, the finding keeps all."""
    names = list(names)
    shown = ", ".join(f"`{n}`" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    out = {s: 0 for s in SEVERITIES}
    for f in findings:
        out[f.severity] += 1
    return out


def findings_frame(findings: Iterable[Finding]) -> pd.DataFrame:
    """Errors first, then warnings, then notes; one row each."""
    # pandas only here, for the table: the header reader (a model-path pre-check) stays light.
    import pandas as pd

    order = {s: i for i, s in enumerate(SEVERITIES)}
    rows = sorted((f.to_dict() for f in findings), key=lambda r: order[r["severity"]])
    return pd.DataFrame([{c: r[c] for c in FINDING_COLUMNS} for r in rows], columns=list(FINDING_COLUMNS))
