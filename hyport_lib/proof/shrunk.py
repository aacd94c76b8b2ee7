"""A model's own config, shrunk to what an attention check needs: every attention detail
kept, decoder layers beyond the first of each kind cut and (``slim``) MLP widths and
experts, so a check on a real 7B or MoE config builds in seconds and a few GiB.
"""

from __future__ import annotations

import copy
from typing import Any

#: Decoder layers kept (more when the model's first layers do not show every layer kind).
KEEP_LAYERS = 2
#: MLP widths of a slim config: attention never sees them.
SLIM_INTERMEDIATE = 128
#: Routed experts of a slim config (at least the number each token uses, cut to this).
SLIM_EXPERTS = 4
_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_EXPERTS_PER_TOKEN = ("num_experts_per_tok", "moe_topk", "top_k")


def shrunk_config(config, keep: int = KEEP_LAYERS, slim: bool = False) -> tuple[Any, str]:
    """A copy of ``config`` with its decoder cut to a few layers (``slim``: MLPs and experts
    too), and what was kept, in words; what stays: docs/attention_swap.md, "The proof before launch"."""
    config = copy.deepcopy(config)
    text = getattr(config, "text_config", None) or config
    total = getattr(text, "num_hidden_layers", None)
    said = []
    if isinstance(total, int) and total > keep:
        needed = _layers_needed(text, total, keep)
        _cut_layers(text, total, needed)
        said.append(f"{needed} of {total} decoder layers")
    else:
        said.append(f"all {total} decoder layers" if isinstance(total, int) else "all layers")
    if slim and _slim(text):
        said.append("MLPs and experts slimmed")
    return config, ", ".join(said)


def _layers_needed(text, total: int, keep: int) -> int:
    needed = keep
    kinds = getattr(text, "layer_types", None)
    if isinstance(kinds, (list, tuple)) and len(kinds) == total:
        firsts = {kind: kinds.index(kind) for kind in kinds}
        needed = max(needed, max(firsts.values()) + 1)
    cross = getattr(text, "cross_attention_layers", None)
    if isinstance(cross, (list, tuple)) and cross:
        needed = max(needed, min(cross) + 1)
    return min(needed, total)


def _cut_layers(text, total: int, needed: int) -> None:
    cross = getattr(text, "cross_attention_layers", None)
    if isinstance(cross, (list, tuple)) and cross:
        text.cross_attention_layers = [i for i in cross if i < needed]
    for name, value in list(vars(text).items()):
        # Per-layer lists (layer_types, Gemma-3n's activation_sparsity_pattern, ...).
        if isinstance(value, (list, tuple)) and len(value) == total and not name.startswith("_"):
            setattr(text, name, list(value[:needed]))
    if isinstance(getattr(text, "num_kv_shared_layers", None), int):
        text.num_kv_shared_layers = 0  # the kept layers compute their own keys and values
    text.num_hidden_layers = needed


def _slim(text) -> bool:
    """Cut MLP widths and routed experts in place; True when anything changed."""
    changed = False
    for name, value in list(vars(text).items()):
        if name.endswith("intermediate_size") and isinstance(value, int) and value > SLIM_INTERMEDIATE:
            setattr(text, name, SLIM_INTERMEDIATE)
            changed = True
    per_token = max((getattr(text, n) for n in _EXPERTS_PER_TOKEN if isinstance(getattr(text, n, None), int)),
                    default=1)
    for name in _EXPERT_COUNTS:
        value = getattr(text, name, None)
        target = max(SLIM_EXPERTS, per_token)
        if isinstance(value, int) and value > target:
            setattr(text, name, target)
            changed = True
            # DeepSeek's grouped routing: the experts must split into its groups.
            for group in ("n_group", "topk_group"):
                if isinstance(getattr(text, group, None), int):
                    setattr(text, group, 1)
    return changed


def slimmed_sizes(config, small) -> set[tuple[int, int]]:
    """``(full, slim)`` pairs of the sizes ``_slim`` cut (MLP widths, expert counts): a
    weight dimension of one of these sizes keeps its first ``slim`` rows (kept_weights.py)."""
    full_text = getattr(config, "text_config", None) or config
    small_text = getattr(small, "text_config", None) or small
    pairs = set()
    for name, value in vars(full_text).items():
        if name.endswith("intermediate_size") or name in _EXPERT_COUNTS:
            cut = getattr(small_text, name, None)
            if isinstance(value, int) and isinstance(cut, int) and cut < value:
                pairs.add((value, cut))
    return pairs


#: Config attributes that name a token id the model's code may look up.
_TOKEN_ID_SUFFIXES = ("_token_id", "_token_ids", "_token_index")


def compact_vocabulary(config, id_tensors) -> tuple[Any, Any, list[int]]:
    """A copy of a text-only model's ``config`` whose vocabulary holds only the ids of
    ``id_tensors`` (and the special ids the config names), the function that maps a
    tensor of old ids onto it (``-100`` kept), and the old ids in their new order (new id
    ``i`` is old id ``order[i]``: the checkpoint's embedding rows the model keeps). Attention
    never sees which token an id is: a real model's 150k-row embedding and output layer (most
    of a small model's weights, and a 512 × 150k logits tensor per forward) shrink to a few
    hundred rows."""
    import torch

    config = copy.deepcopy(config)
    text = getattr(config, "text_config", None) or config
    used = set()
    for tensor in id_tensors:
        used.update(int(i) for i in torch.unique(tensor) if int(i) >= 0)
    specials = _named_token_ids(text)
    for value in specials.values():
        used.update(value if isinstance(value, (list, tuple)) else [value])
    order = sorted(used)
    lookup = torch.full((max(order) + 1,), -1, dtype=torch.long)
    lookup[torch.tensor(order)] = torch.arange(len(order))
    for name, value in specials.items():
        setattr(text, name, [int(lookup[i]) for i in value] if isinstance(value, (list, tuple))
                else int(lookup[value]))
    text.vocab_size = len(order)

    def remap(tensor):
        out = tensor.clone()
        keep = tensor >= 0
        out[keep] = lookup[tensor[keep]]
        return out

    return config, remap, order


def special_token_ids(config) -> set[int]:
    """The token ids ``config`` names (image placeholders, bos, pad...): ids the model's code
    may count or look up, which a check that changes a sample's tokens leaves alone."""
    found = set()
    for section in (config, getattr(config, "text_config", None) or config):
        for value in _named_token_ids(section).values():
            found.update(value if isinstance(value, (list, tuple)) else [value])
    return found


def _named_token_ids(section) -> dict:
    """The config attributes of ``section`` that name token ids, all of them valid ids."""
    named = {}
    for name, value in vars(section).items():
        ids = value if isinstance(value, (list, tuple)) else [value]
        if name.endswith(_TOKEN_ID_SUFFIXES) and all(isinstance(i, int) and i >= 0 for i in ids):
            named[name] = value
    return named
