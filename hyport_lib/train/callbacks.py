"""Inside the training processes: the Trainer pieces hyport adds (this module imports
transformers at its top, so only the workers import it)."""

from __future__ import annotations

import math
import os
import time
from dataclasses import astuple, dataclass, replace
from pathlib import Path
from typing import Optional

from transformers import Trainer, TrainerCallback

from hyport_lib.models.module_tree import retie
from hyport_lib.models.training_inputs import IMAGE_MASK, IMAGE_STATES, image_states_of_rows, rows_seeing_images
from hyport_lib.results import CHECKPOINT_MARKER
from hyport_lib.train.output_dir import SAVING_MARKER, write_marker
from hyport_lib.train.packing import COUNT_KEYS
from hyport_lib.train.result import StepMetrics
from hyport_lib.utils.files import disk_full_error, dumps_json
from hyport_lib.utils.typed_records import to_mapping


@dataclass
class StepCounts:
    """Token counts and losses of this rank's micro-batches of the step under way."""

    real: int = 0
    total: int = 0
    loss: float = 0.0
    nonfinite: int = 0

    def add_loss(self, value: float) -> None:
        if math.isfinite(value):
            self.loss += value
        else:
            self.nonfinite += 1

    def take(self) -> tuple[int, int, float, int]:
        counts = astuple(self)
        self.real, self.total, self.loss, self.nonfinite = 0, 0, 0.0, 0
        return counts


class CountingTrainer(Trainer):
    """``Trainer`` that counts hyport's count keys of each batch; runs a blank image on text-only
    batches, so that every rank gives gradients to the same parameters (a cross-attention VLM's rows
    that see no image get no image states: :mod:`hyport_lib.models.training_inputs`)."""

    def __init__(self, *args, step_counts: Optional[StepCounts] = None, dummy_image_inputs=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.step_counts = step_counts or StepCounts()
        #: the image processor's tensors for one blank image, or None: no image path to run
        self.dummy_image_inputs = dummy_image_inputs
        self.save_seconds = 0.0  # writing checkpoints, left out of the throughput

    def _save(self, output_dir: Optional[str] = None, state_dict=None):
        # Under DeepSpeed the Trainer saves accelerate's copies of the tensors, which hide
        # tied weights from save_pretrained: a checkpoint would hold lm_head twice.
        if state_dict is not None:
            retie(self.accelerator.unwrap_model(self.model), state_dict)
        super()._save(output_dir, state_dict=state_dict)

    def training_step(self, model, inputs, *args, **kwargs):
        loss = super().training_step(model, inputs, *args, **kwargs)
        self.step_counts.add_loss(float(loss.detach().float().item()))
        return loss

    def _run_image_path_after_embeddings(self, model, holder: dict):
        """The hook (to remove; None without ``get_image_features`` or input embeddings) that runs
        the image path on a blank image right after the token embeddings, where LLaVA-style
        forwards run it; ``holder["zero"]`` gets 0 x its features.

        A text-only batch never runs the image path, so that rank gives its parameters no
        gradient while a rank with images does, and DeepSpeed's collectives abort ("Received data
        size doesn't match expected size"); LLaMA-Factory feeds a placeholder image for the same
        reason. Times zero, it changes no loss. Under ZeRO-3 the job still hangs: the worker
        leaves it off there and preflight refuses text-only rows beside image rows."""
        net = self.accelerator.unwrap_model(model)
        get = getattr(net, "get_image_features", None)
        embeddings = net.get_input_embeddings() if hasattr(net, "get_input_embeddings") else None
        if get is None or embeddings is None:
            return None

        accepted = _accepted_arguments(get)

        def after_embeddings(module, args, output):
            if "zero" in holder:
                return  # once per forward
            dtype = self._vision_dtype(net)
            inputs = {k: (v.to(output.device, dtype) if v.is_floating_point() else v.to(output.device))
                      for k, v in self.dummy_image_inputs.items() if k in accepted}
            parts = [t.float().sum() for t in _tensors(_image_features(get(**inputs))) if t.requires_grad]
            holder["zero"] = sum(parts) * 0.0 if parts else None

        return embeddings.register_forward_hook(after_embeddings)

    def _blank_image_rows(self, net, inputs: dict) -> dict:
        """The blank image as every row's image and a per-token image mask of zeros, for a
        model that reads each row's images through cross-attention (mllama). Such a model skips
        its cross-attention layers without images, out of the embeddings hook's reach: the blank
        image goes through the forward itself, so every module an image batch runs runs here too,
        in the same order. Its states are zeros by the time the language model reads them
        (``image_states_of_rows``): each cross-attention layer adds exactly 0, and every
        parameter of the image path gets a gradient of 0."""
        import torch

        ids = inputs["input_ids"]
        rows, length = int(ids.shape[0]), int(ids.shape[1])
        dtype = self._vision_dtype(net)
        accepted = _accepted_arguments(net.forward)
        blank = {}
        for key, value in self.dummy_image_inputs.items():
            if key not in accepted:
                continue
            value = value.to(ids.device, dtype) if value.is_floating_point() else value.to(ids.device)
            blank[key] = value.expand(rows, *value.shape[1:]) if value.shape[0] == 1 else value
        pixels = blank["pixel_values"]
        # (rows, tokens, images, tiles): the pixels' axes between the sample and the picture
        blank[IMAGE_MASK] = torch.zeros((rows, length, *pixels.shape[1:pixels.dim() - 3]), dtype=torch.long,
                                        device=ids.device)
        return blank

    @staticmethod
    def _vision_dtype(net):
        return next((p.dtype for p in net.parameters() if p.is_floating_point()), None)

    def _save_checkpoint(self, model, trial, *args, **kwargs):
        # The folder may exist from an earlier run or attempt: until this save has
        # finished it must not look complete (on_save marks it again).
        if self.args.should_save:  # rank 0; node-local storage: each node's first process
            folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
            (folder / CHECKPOINT_MARKER).unlink(missing_ok=True)
            # hyport's before the Trainer writes anything: a save killed half-way is still
            # known as ours (only hyport's checkpoints are ever removed).
            folder.mkdir(parents=True, exist_ok=True)
            (folder / SAVING_MARKER).write_text(dumps_json({"step": self.state.global_step}) + "\n",
                                                encoding="utf-8")
        started = time.perf_counter()
        try:
            return super()._save_checkpoint(model, trial, *args, **kwargs)
        except Exception as exc:
            full = disk_full_error(exc, Path(self.args.output_dir), self._checkpoint_bytes())
            if full is None:
                raise
            raise full from exc
        finally:
            self.save_seconds += time.perf_counter() - started

    def _checkpoint_bytes(self) -> int:
        """The weights, DeepSpeed's fp32 master copy and two Adam moments of every trained
        parameter (12 bytes each)."""
        total = 0
        for parameter in self.model.parameters():
            count = int(getattr(parameter, "ds_numel", 0) or parameter.numel())
            total += count * parameter.element_size() + (12 * count if parameter.requires_grad else 0)
        return total

    def compute_loss(self, model, inputs, *args, **kwargs):
        counts = [inputs.pop(key, 0) for key in COUNT_KEYS]
        if model.training:
            self.step_counts.real += int(counts[0])
            self.step_counts.total += int(counts[1])
        net = _transformers_model(self.accelerator.unwrap_model(model))
        image_path: dict = {}
        hook, blank_rows = None, False
        if model.training and inputs.get("pixel_values") is None and self.dummy_image_inputs is not None:
            if _accepted_arguments(net.forward) >= {IMAGE_STATES, IMAGE_MASK}:
                inputs = {**inputs, **self._blank_image_rows(net, inputs)}
                blank_rows = True
            else:
                hook = self._run_image_path_after_embeddings(model, image_path)
        seeing = rows_seeing_images(inputs)
        states = image_states_of_rows(net, seeing) if seeing is not None else None
        try:
            result = super().compute_loss(model, inputs, *args, **kwargs)
        finally:
            if hook is not None:
                hook.remove()
            if states is not None:
                states["remove"]()
        if blank_rows and not (states and states["calls"]):
            # The blank image's states reached the language model unscaled (passed by
            # position?): the loss would not be the batch's own. transformers 4.57 and 5.24
            # pass them by keyword.
            raise RuntimeError(f"the blank image's {IMAGE_STATES} never reached {type(net).__name__}'s "
                               "language model as a keyword argument, so they could not be zeroed")
        if image_path.get("zero") is not None:
            result = add_to_loss(result, image_path["zero"])
        return result


#: Parts of a vision model output that hold the tower's own states, not what the model feeds on.
_TOWER_STATES = ("last_hidden_state", "hidden_states", "attentions")


def _image_features(output):
    """What of ``get_image_features``' output the model feeds on. transformers 5 returns a model
    output: ``pooler_output`` (the projected features) and extra features (Qwen3-VL's deepstack)
    sit beside the tower's own last hidden state, which some models never use (LLaVA-OneVision
    takes an earlier layer): touching it would give parameters a gradient a real image does not."""
    if isinstance(output, dict) and output.get("pooler_output") is not None:
        return [value for key, value in output.items() if key not in _TOWER_STATES]
    return output


def _transformers_model(net):
    """The model under a peft wrapper: its ``forward`` names its inputs (a ``PeftModel``'s takes
    ``**kwargs``)."""
    get = getattr(net, "get_base_model", None)
    return get() if callable(get) else net


def _accepted_arguments(function) -> set:
    """The parameter names ``function`` declares (a ``**kwargs`` would take any key and
    ignore it, or pass it where it does not belong: only named ones are given)."""
    import inspect

    parameters = inspect.signature(function).parameters
    return {name for name, p in parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}


def add_to_loss(result, extra):
    if isinstance(result, tuple):  # (loss, outputs)
        return (result[0] + extra, *result[1:])
    return result + extra


def _tensors(value):
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):  # ModelOutput is an OrderedDict
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


class MetricsCallback(TrainerCallback):
    """One metrics line per optimizer step, its sums reduced over the ranks (every rank calls
    it), appended by rank 0 once the Trainer logged the learning rate and gradient norm; each
    saved checkpoint marked complete with ``marker``'s fields. The loss is measured here, not
    taken from the Trainer's log: the Trainer replaces a non-finite loss by the running mean
    (``logging_nan_inf_filter``), and a smoke run exists to show exactly that step."""

    def __init__(self, metrics_path: os.PathLike, backend, step_counts: StepCounts, marker: dict):
        self.metrics_path = Path(metrics_path)
        self.backend = backend
        self.step_counts = step_counts
        self.marker = dict(marker)
        self.trainer: Optional[Trainer] = None  # set after the Trainer is built
        self._started = 0.0
        self._pending: Optional[StepMetrics] = None  # this step's line, until the Trainer logs
        self._process_steps = 0
        self._skipped_before = 0
        self._save_seen = 0.0
        self.restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        #: This rank's card: torchrun's LOCAL_RANK (every card of the node is visible).
        self.backend_index = int(os.environ.get("LOCAL_RANK", "0") or 0)

    def on_train_begin(self, args, state, control, **kwargs):
        # A resumed Trainer takes save_steps from the checkpoint's trainer_state.json (it
        # only warns): this run's value must win.
        state.save_steps = args.save_steps
        # DeepSpeed restores its skipped-step count with the checkpoint: count from there.
        self._skipped_before = self._skipped_total()

    def on_step_begin(self, args, state, control, **kwargs):
        if not self._started:  # the first step of this process
            self.backend.synchronize(self.backend_index)
            self._started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        # A step lasts from the end of the one before: the data loading, the logging, a
        # checkpoint saved and this callback's own all-reduces are all part of it.
        self.backend.synchronize(self.backend_index)
        now = time.perf_counter()
        step_s, self._started = now - self._started, now
        # A checkpoint written after the previous step falls into this one: recorded apart
        # (save_s), and left out of the throughput, which is about training.
        saved = float(getattr(self.trainer, "save_seconds", 0.0) or 0.0)
        save_s, self._save_seen = max(0.0, saved - self._save_seen), saved
        busy_s = max(step_s - save_s, 1e-9)
        real, total, loss, nonfinite = self.step_counts.take()
        memory = self.backend.memory_stats(self.backend_index)
        real, total, loss, nonfinite, peak = _reduce(
            [real, total, loss, nonfinite], memory.peak / 2**20, self.backend, self.backend_index)
        skipped_total = self._skipped_total()
        self._process_steps += 1
        world = _world_size()
        self._pending = StepMetrics(
            step=int(state.global_step), loss=loss / world if not nonfinite else float("nan"),
            nonfinite_loss=bool(nonfinite), real_tokens=int(real), tokens=int(total),
            step_s=round(step_s, 6), save_s=round(save_s, 6), world_size=world,
            tokens_per_s_per_card=total / (world * busy_s) if step_s > 0 else None,
            real_tokens_per_s_per_card=real / (world * busy_s) if step_s > 0 else None,
            skipped=skipped_total > self._skipped_before, skipped_total=skipped_total,
            peak_memory_mb=round(peak, 1), memory_source=memory.source,
            epoch=state.epoch, restart=self.restart, process_step=self._process_steps)
        self._skipped_before = skipped_total

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._pending is None or logs is None or "loss" not in logs:
            return
        grad_norm = _number(logs.get("grad_norm"))
        record = replace(self._pending, learning_rate=_number(logs.get("learning_rate")), grad_norm=grad_norm,
                         nonfinite_grad_norm=grad_norm is not None and not math.isfinite(grad_norm),
                         logged_loss=_number(logs.get("loss")), time=time.time())
        self._pending = None
        if state.is_world_process_zero:
            with open(self.metrics_path, "a", encoding="utf-8") as fh:
                # strict JSON: a NaN / Inf is null, its flag (nonfinite_loss, ...) says which
                fh.write(dumps_json(to_mapping(record)) + "\n")
                fh.flush()

    def on_save(self, args, state, control, **kwargs):
        barrier()  # every rank's part (its RNG state too) is on disk first
        if not args.should_save:  # rank 0; node-local storage: each node's first process
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            write_marker(folder, step=state.global_step, **self.marker)

    def _skipped_total(self) -> int:
        engine = getattr(self.trainer, "model_wrapped", None) if self.trainer else None
        return int(getattr(engine, "skipped_steps", 0) or 0)


def process_group():
    """``torch.distributed`` once its process group is up, else None."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def barrier() -> None:
    if process_group():
        process_group().barrier()


def _world_size() -> int:
    return process_group().get_world_size() if process_group() else 1


def _reduce(sums: list[float], peak_mb: float, backend, index: int) -> list[float]:
    """``sums`` (real tokens, tokens, loss, non-finite count) summed and ``peak_mb`` maxed
    over the ranks (every rank calls it). Counts go as int64 and the rest as float32: HCCL on
    Atlas A2/A3 (910B) reduces no float64, and float32 sums token counts exactly only up to 2**24."""
    import torch
    import torch.distributed as dist

    if _world_size() == 1:
        return [*sums, peak_mb]
    device = backend.torch_device(index) if backend.is_accelerator else torch.device("cpu")
    real, total, loss, nonfinite = sums
    counts = torch.tensor([int(real), int(total), int(nonfinite)], dtype=torch.int64, device=device)
    values = torch.tensor([float(loss)], dtype=torch.float32, device=device)
    peak = torch.tensor([float(peak_mb)], dtype=torch.float32, device=device)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    real, total, nonfinite = counts.tolist()
    return [real, total, float(values[0].item()), nonfinite, float(peak[0].item())]


def _number(value) -> Optional[float]:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
