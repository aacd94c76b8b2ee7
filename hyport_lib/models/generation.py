"""Inference as a library: the HY-Embodied reference ``inference.py`` as functions, its one
image + text prompt ("Result: ...") and its left-padded mixed batch ("Batch Sample 1: ...").
Greedy decoding of one checkpoint must give the same ``output_hash`` on every card.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional, Sequence

from hyport_lib.backend import get_backend
from hyport_lib.models.generation_config import DEFAULT_BATCH_PROMPTS, InferenceConfig, InferenceOutcome
from hyport_lib.models.loading import (LoadedProcessor, ProcessorUnavailable, load_processor, tokenizer_of,
                                       traits_of)
from hyport_lib.models.loading import load_model as load_checkpoint  # ours: load_model(config)
from hyport_lib.models.prompts import Prompt, PromptNotApplicable, check_applicable, encode_prompts, sample_image
from hyport_lib.models.tiny import resolve_model_path
from hyport_lib.npu_attention.hf_integration import (REGISTERED, UnsupportedAttentionArgument,
                                                    register_hyport_attention, sdpa_refusal)
from hyport_lib.npu_attention.names import BACKEND_OF_NAME, backend_of, check_runs_on


def load_model(config: InferenceConfig):
    """``(model, loaded)``: the model in eval mode on ``config.device`` and its processor,
    padding on the left; a hyport ``attn_implementation`` is registered in this process first."""
    import torch

    backend, index, device = _backend_for(config.device)
    path = resolve_model_path(config.model_path)
    loaded = load_processor(path, trust_remote_code=config.trust_remote_code)
    tokenizer_of(loaded.processor).padding_side = "left"
    dtype = "auto" if config.dtype == "auto" else getattr(torch, config.dtype)
    if config.attn_implementation in BACKEND_OF_NAME:
        # registered in this process, as the training worker does: a name is not a kernel
        check_runs_on(config.attn_implementation, backend.kind)
        register_hyport_attention(backend_of(config.attn_implementation), config.attn_implementation)
    model = load_checkpoint(path, attn_implementation=config.attn_implementation, dtype=dtype,
                            trust_remote_code=config.trust_remote_code, traits=loaded.traits)
    if backend.is_accelerator:
        backend.set_device(index)
    model = model.to(device).eval()
    backend.synchronize()
    return model, loaded


def single_prompt(loaded: LoadedProcessor, config: InferenceConfig) -> Prompt:
    """The single inference's prompt: with the image, or text only for a text-only model
    (PromptNotApplicable where ``image`` was given for one)."""
    if not loaded.traits.multimodal:
        if config.image is not None:
            raise PromptNotApplicable(f"image={config.image!r}: {loaded.traits.model_type or 'the model'} "
                                      "is a text-only model; leave image unset")
        return Prompt(config.single_prompt)
    return Prompt(config.single_prompt, [_load_image(config)])


def batch_prompts(loaded: LoadedProcessor, config: InferenceConfig) -> tuple[list[Prompt], list[str]]:
    """The batch's prompts this model can take, and each one it cannot, named with why.
    A prompt the user chose that cannot go to this model raises PromptNotApplicable unless
    ``skip_not_applicable`` (the default prompts are always fitted)."""
    fit = config.skip_not_applicable or tuple(config.batch_prompts) == DEFAULT_BATCH_PROMPTS
    prompts, skipped = [], []
    for i, (text, uses_image) in enumerate(config.batch_prompts):
        prompt = Prompt(text, [_load_image(config)] if uses_image and loaded.traits.multimodal else [])
        what = f"batch_prompts[{i}] {text!r}"
        try:
            if uses_image and not loaded.traits.multimodal:
                raise PromptNotApplicable(f"{what}: an image prompt, but {loaded.traits.model_type or 'the model'} "
                                          "is a text-only model")
            check_applicable(loaded, prompt, what)
        except PromptNotApplicable as exc:
            if not fit:
                raise PromptNotApplicable(f"{exc}; leave it out, or skip_not_applicable=True") from None
            skipped.append(str(exc))
            continue
        prompts.append(prompt)
    return prompts, skipped


def check_prompts(config: InferenceConfig, model_dir: str) -> None:
    """Before any worker starts, from the config alone: PromptNotApplicable for what a
    text-only model cannot take, by the workers' rules."""
    try:
        traits = traits_of(model_dir, config.trust_remote_code)
    except ValueError:
        return  # a model type transformers cannot load: every worker says so (scrubbed, per card)
    loaded = LoadedProcessor(None, traits)
    if not loaded.traits.multimodal:
        single_prompt(loaded, config)
        batch_prompts(loaded, config)


def check_processor(config: InferenceConfig, model_dir: str) -> None:
    """Before any worker starts: ProcessorUnavailable for a processor this stack cannot
    build (it needs the missing torchvision), in one line, not once per card."""
    try:
        load_processor(model_dir, trust_remote_code=config.trust_remote_code)
    except ProcessorUnavailable:
        raise
    except Exception:  # noqa: BLE001 — any other failure: each worker names it in its card's log
        return


def not_applicable_parts(loaded: LoadedProcessor, config: InferenceConfig) -> list[str]:
    parts = []
    if not loaded.traits.multimodal:
        parts.append(f"single prompt runs without its image: {loaded.traits.model_type or 'the model'} "
                     "is a text-only model")
    return parts + batch_prompts(loaded, config)[1]


def run_single(model, loaded: LoadedProcessor, config: InferenceConfig) -> tuple[str, dict]:
    """``(text, stats)``: stats are the single inference's :class:`InferenceOutcome` fields."""
    inputs = _to_device(encode_prompts(loaded, [single_prompt(loaded, config)],
                                       enable_thinking=config.enable_thinking), model)
    prompt_tokens = int(inputs["input_ids"].shape[1])

    backend, _, _ = _backend_for(config.device)
    backend.synchronize()
    streamer = _FirstTokenTimer()
    output = model.generate(**inputs, **_generate_kwargs(config), streamer=streamer)
    backend.synchronize()
    generate_s = time.perf_counter() - streamer.started
    new_ids = output[:, prompt_tokens:]
    new_tokens = int(new_ids.shape[1])
    stats = {
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "first_token_s": streamer.first_token_s if streamer.first_token_s is not None else generate_s,
        "generate_s": generate_s,
        "tokens_per_s": new_tokens / generate_s if generate_s > 0 else 0.0,
        "decode_tokens_per_s": decode_rate(new_tokens, generate_s, streamer.first_token_s),
    }
    return _decode(loaded, new_ids)[0], stats


def run_batch(model, loaded: LoadedProcessor, config: InferenceConfig) -> list[str]:
    """The batch's answers, prompts this model cannot take left out."""
    prompts, _ = batch_prompts(loaded, config)
    if not prompts:
        return []
    inputs = _to_device(encode_prompts(loaded, prompts, enable_thinking=config.enable_thinking), model)
    output = model.generate(**inputs, **_generate_kwargs(config))
    return _decode(loaded, output[:, inputs["input_ids"].shape[1]:])


def run_inference(config: InferenceConfig) -> InferenceOutcome:
    """``load_s`` leaves out the one-off import of transformers and building the tiny model's cache."""
    import transformers  # noqa: F401

    resolve_model_path(config.model_path)
    backend, index, _ = _backend_for(config.device)
    started = time.perf_counter()
    model, loaded = load_model(config)
    load_s = time.perf_counter() - started
    # The model check reports such a model as REFUSED; a grid refuses to serve it.
    refusal = sdpa_refusal(model) if config.attn_implementation.startswith("hyport") else None
    if refusal:
        raise UnsupportedAttentionArgument(f"attn_implementation={config.attn_implementation!r}: {refusal}; "
                                           "use attn_implementation='eager'")

    cold_s = None  # the first untimed call's seconds (start-up costs): the cold call
    for i in range(config.warmup_runs):
        started = time.perf_counter()
        run_single(model, loaded, config)
        backend.synchronize()
        cold_s = time.perf_counter() - started if i == 0 else cold_s
    single, stats = run_single(model, loaded, config)
    started = time.perf_counter()
    batch = run_batch(model, loaded, config)
    backend.synchronize()
    batch_s = time.perf_counter() - started

    return InferenceOutcome(
        load_s=load_s,
        **stats,
        single_output=single,
        batch_outputs=batch,
        output_hash=output_hash(single, batch),
        model_type=str(getattr(model.config, "model_type", type(model).__name__)),
        num_parameters=int(model.num_parameters()),
        dtype=str(model.dtype).replace("torch.", ""),
        device=str(model.device),
        attn_implementation=str(getattr(model.config, "_attn_implementation", None)
                                or config.attn_implementation),
        trust_remote_code=config.trust_remote_code,
        batch_s=batch_s,
        memory=asdict(backend.memory_stats(index)),
        model_path=config.model_path,
        cold_s=cold_s,
        warmup_runs=config.warmup_runs,
        model_kind=loaded.traits.kind,
        not_applicable=not_applicable_parts(loaded, config),
        processor_unavailable=list(loaded.unavailable),
        attention_calls=REGISTERED[config.attn_implementation].calls.total()
        if config.attn_implementation in REGISTERED else None,
    )


def run_on_card(spec: dict) -> dict:
    """One card of stage 03's grid (``inference.grid``), in the child its launcher started
    pinned to the card, which is index 0 here."""
    backend = get_backend(spec.get("device_kind", "cpu"))
    backend.set_device(0)
    if spec.get("num_threads"):
        import torch

        torch.set_num_threads(int(spec["num_threads"]))
    config = InferenceConfig.from_dict({**spec["inference"], "device": backend.device(0)})
    backend.reset_peak_memory(0)
    outcome = run_inference(config)
    backend.synchronize(0)
    memory = backend.memory_stats(0)
    return {"card": int(spec["card"]), "device": backend.device(0), "device_kind": backend.kind,
            "outcome": outcome.to_dict(), "peak_memory_bytes": memory.peak,
            "memory_source": memory.source}


def output_hash(single: str, batch: Sequence[str]) -> str:
    return hashlib.sha256("\n".join([single, *batch]).encode("utf-8")).hexdigest()


def decode_rate(new_tokens: int, generate_s: float,
                first_token_s: Optional[float]) -> Optional[float]:
    """Decoding speed without the prefill, or None where it cannot be told."""
    if first_token_s is None or new_tokens < 2:
        return None
    decode_s = generate_s - first_token_s
    return (new_tokens - 1) / decode_s if decode_s > 0 else None


def _backend_for(device: str):
    """``(backend, card index, torch device string)``; ``"auto"``: the best backend's card 0."""
    device = str(device).strip()
    if device == "auto":
        backend = get_backend("auto")
        return backend, 0, backend.device(0)
    kind, _, index = device.partition(":")
    try:
        card = int(index) if index else 0
    except ValueError:
        raise ValueError(f"device={device!r}: expected e.g. 'cpu', 'cuda:0' or 'npu:0'") from None
    return get_backend(kind), card, device


def _load_image(config: InferenceConfig):
    if config.image is None:
        return sample_image()
    from PIL import Image

    path = Path(config.image).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"image={config.image!r}: no such file")
    with Image.open(path) as img:
        return img.convert("RGB")


def _to_device(inputs, model):
    """Floating tensors also take the model's dtype (pixel values come out as float32)."""
    import torch

    moved = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.to(model.device, model.dtype if value.is_floating_point() else value.dtype)
        moved[key] = value
    return moved


def _generate_kwargs(config: InferenceConfig) -> dict:
    import torch

    # Seeding before every call makes sampling repeatable; greedy ignores it.
    torch.manual_seed(config.seed)
    kwargs: dict[str, Any] = {"max_new_tokens": config.max_new_tokens}
    if config.greedy:
        kwargs["do_sample"] = False
    else:
        kwargs.update(do_sample=True, temperature=config.temperature)
    return kwargs


def _decode(loaded: LoadedProcessor, token_ids) -> list[str]:
    texts = tokenizer_of(loaded.processor).batch_decode(token_ids, skip_special_tokens=True)
    return [text.strip() for text in texts]


class _FirstTokenTimer:
    """A generate() streamer noting when the first new token arrives (its clock starts when
    it is made): generate() puts the prompt first, so the second put is that token; its
    ``.cpu()`` waits for the device, so the time is real on asynchronous backends."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first_token_s: Optional[float] = None
        self._puts = 0

    def put(self, value) -> None:
        self._puts += 1
        if self._puts == 2 and self.first_token_s is None:
            value.cpu()
            self.first_token_s = time.perf_counter() - self.started

    def end(self) -> None:
        if self.first_token_s is None:  # ended without a second put
            self.first_token_s = time.perf_counter() - self.started


def greedy(model, inputs: dict, new_tokens: int) -> tuple[list[int], float]:
    """The greedy answer's token ids (without the prompt) and the mean probability of the
    tokens chosen (stage 02's behaviour check, stage 04's answers before and after)."""
    import torch

    # use_cache: a training worker turns the KV cache off in the config; generating without
    # it would recompute the whole prefix at every token.
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, use_cache=True)
    ids = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    probs = [float(torch.softmax(score[0].float(), -1).max()) for score in out.scores]
    return ids, sum(probs) / max(len(probs), 1)

