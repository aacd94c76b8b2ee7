#!/usr/bin/env bash
# The seed host's transformers (4.57.0) against the same torch: the tests of every module
# whose code differs between transformers 4.x and 5.x (torch_dtype vs dtype, the image
# processor class, AttentionInterface, the masks handed to attention functions, the
# on-disk weight names, the Trainer), and two real torchrun + DeepSpeed training runs (the
# session's shared ZeRO-2 run of tests/fixtures_runs.py, and an unpacked run with a
# text-only rank). Its slow tests read the same session fixtures as the main run; the zoo
# and the tiny model are cached under HYPORT_CACHE (the overlay's own), keyed by the
# transformers version, so they are never mixed with the main run's. The inference proof's
# test on zoo VLMs and the model check's on the zoo's Llama are left out: the zoo's tokenizers
# do not build on 4.57.
# transformers 4.57 and its hub/tokenizers pins go into an overlay folder on PYTHONPATH,
# so .venv itself stays on the CPU pins.
#   bash scripts/test_transformers457.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
overlay=.overlay-transformers457
if [ ! -f "$overlay/.complete" ]; then
  rm -rf "$overlay"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --target "$overlay" \
    transformers==4.57.0 huggingface_hub==0.36.0 tokenizers==0.22.1
  touch "$overlay/.complete"
fi
unset PYTHONDONTWRITEBYTECODE  # as scripts/test.sh: compiled once, not in every process
export PYTHONPATH="$PWD/$overlay${PYTHONPATH:+:$PYTHONPATH}"
export HYPORT_CACHE="$PWD/$overlay/hyport-cache"
.venv/bin/python -c "import transformers; assert transformers.__version__ == '4.57.0', transformers.__version__; print('transformers', transformers.__version__)"
exec .venv/bin/python -m pytest -n "${HYPORT_TEST_WORKERS:-auto}" tests/models/test_tiny.py tests/models/test_generation.py \
  tests/npu_attention/test_hf_integration.py tests/npu_attention/test_flash_api.py tests/npu_attention/test_flash_attn_ascend.py tests/attention/test_compare.py \
  tests/proof/test_model_check.py \
  tests/weights/test_weights_findings.py tests/weights/test_weights_scan.py tests/weights/test_weights_reload.py \
  tests/train/test_dataset.py tests/train/test_samples.py tests/train/test_packing.py tests/port/test_codemod.py tests/port/test_tree.py tests/port/test_port_models.py tests/models/test_module_tree.py \
  tests/inference/test_inference_attention.py \
  --deselect tests/inference/test_inference_attention.py::test_vlm_prompts_prove_the_swap_they_used_to_fail \
  --deselect tests/proof/test_model_check.py::test_stage_02_keeps_the_padded_verdict_when_the_packed_row_raises \
  "tests/train/test_training_run.py::test_zero2_run_exits_0_and_its_weights_reload" \
  "tests/train/test_training_run.py::test_text_only_and_image_batches_on_different_ranks_train" "$@"
