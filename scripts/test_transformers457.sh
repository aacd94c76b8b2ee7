#!/usr/bin/env bash
# The seed host's transformers (4.57.0) against the same torch: the tests of every module
# whose code differs between transformers 4.x and 5.x (torch_dtype vs dtype, the image
# processor class, AttentionInterface, the masks handed to attention functions, the
# on-disk weight names, the Trainer), and two real torchrun + DeepSpeed training runs (the
# session's shared ZeRO-2 run of tests/fixtures_runs.py, and an unpacked run with a
# text-only rank). Its slow tests read the same session fixtures as the main run; the zoo
# and the tiny model are cached under HYPORT_CACHE (the overlay's own), keyed by the
# transformers version, so they are never mixed with the main run's. The inference proof's
# test on zoo VLMs, the model check's on the zoo's Llama (its packed row's isolation too: the
# tiny model's test checks it here) and the workers' no-KV-cache check on zoo models are left
# out: the zoo's tokenizers do not build on 4.57.
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
  tests/npu_attention/test_hf_integration.py tests/npu_attention/test_flash_api.py tests/npu_attention/test_flash_attn_ascend.py \
  tests/attention/test_cases.py tests/attention/test_implementations.py tests/attention/test_compare.py \
  tests/attention/test_show.py tests/attention/test_views.py tests/attention/test_stage.py::test_summary_and_record \
  tests/attention/test_stage.py::test_planted_scan tests/attention/test_stage.py::test_cli_writes_json_and_exit_code \
  tests/attention/test_stage.py::test_the_summary_names_the_device_of_each_implementation \
  tests/proof/test_model_check.py \
  tests/weights/test_verify.py tests/weights/test_layout.py tests/weights/test_result.py tests/weights/test_scan.py \
  tests/weights/test_compare.py tests/weights/test_names.py tests/weights/test_reload.py \
  tests/train/test_dataset.py tests/train/test_samples.py tests/train/test_packing.py tests/port/test_codemod.py tests/port/test_tree.py tests/port/test_port_models.py tests/models/test_module_tree.py \
  tests/npu_attention/test_runnable.py tests/triage/test_catalogue.py::test_transformers_refusals_of_an_attention_are_recognised_and_the_advice_names_auto \
  tests/inference/test_stage.py::test_auto_runs_eager_off_an_npu_and_proves_nothing \
  tests/inference/test_stage.py::test_a_named_swap_proves_itself_on_prefill_and_cached_decoding \
  tests/inference/test_stage.py::test_auto_on_an_npu_runs_the_fused_kernel_once_the_emulation_proves_it \
  tests/inference/test_stage.py::test_a_swap_wrong_only_when_decoding_keeps_the_grid_on_eager \
  tests/inference/test_stage.py::test_the_plan_reckons_host_ram_from_the_model \
  tests/inference/test_stage.py::test_a_tied_embedding_is_counted_once_in_the_host_ram_need \
  tests/proof/test_choice.py::test_auto_means_eager_in_training_and_in_the_reload \
  tests/proof/test_choice.py::test_a_hub_id_on_auto_keeps_eager_and_says_why_without_fetching \
  --deselect tests/proof/test_model_check.py::test_stage_02_keeps_the_padded_verdict_when_the_packed_row_raises \
  --deselect tests/proof/test_model_check.py::test_stage_02_says_packing_would_be_refused_for_a_layer_that_mixes_samples \
  --deselect tests/proof/test_model_check.py::test_stage_02_fails_a_swap_that_lets_packed_samples_meet \
  --deselect tests/proof/test_model_check.py::test_stage_02_says_a_model_keeps_packed_samples_apart \
  --deselect tests/proof/test_model_check.py::test_the_whole_model_is_loaded_once_and_runs_eager_then_the_swap_in_each_dtype \
  --deselect tests/npu_attention/test_hf_integration.py::test_the_workers_train_without_a_kv_cache_as_the_proof_ran \
  "tests/train/test_training_run.py::test_zero2_run_exits_0_and_its_weights_reload" \
  "tests/train/test_training_run.py::test_text_only_and_image_batches_on_different_ranks_train" "$@"
