"""What a checkpoint is, read from its config (models/families.py): images or not, the auto
class, multimodal rotary positions, whatever loads it (remote code included)."""

from __future__ import annotations

import pytest

from hyport_lib.models.families import describe_config, is_encoder_decoder


def test_remote_code_vlms_loaded_as_causal_lms_are_still_vlms():
    phi3v = describe_config({"model_type": "phi3_v", "img_processor": {},
                             "auto_map": {"AutoConfig": "c.C", "AutoModelForCausalLM": "m.M"}})
    assert phi3v.multimodal and phi3v.auto_class == "AutoModelForCausalLM"
    minicpm = describe_config({"model_type": "minicpmv", "vision_config": {},
                               "auto_map": {"AutoConfig": "c.C", "AutoModel": "m.M"}})
    assert minicpm.multimodal and minicpm.auto_class == "AutoModel"
    plain = describe_config({"model_type": "x", "auto_map": {"AutoModelForCausalLM": "m.M"}})
    assert not plain.multimodal
    with pytest.raises(ValueError, match="auto_map names no model class"):
        describe_config({"model_type": "x", "auto_map": {"AutoTokenizer": "t.T"}})


def test_mrope_is_found_in_any_sub_config_and_hunyuan_vl_packs_without_a_text_row():
    hunyuan = describe_config({"model_type": "hunyuan_vl", "auto_map": {"AutoModelForImageTextToText": "m.M"},
                               "text_config": {"rope_scaling": {"mrope_section": [16, 24, 24]}}})
    assert hunyuan.multimodal and hunyuan.remote_code and hunyuan.mrope and not hunyuan.mrope_text_row
    assert hunyuan.kind == "image-text-to-text"
    llama = describe_config({"model_type": "llama"})
    assert (llama.auto_class, llama.mrope, llama.remote_code, llama.kind) == (
        "AutoModelForCausalLM", False, False, "text-only")


def test_a_model_type_transformers_cannot_load_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"^model_type='hyport_no_such_model': transformers has no "):
        describe_config({"model_type": "hyport_no_such_model"})


@pytest.mark.parametrize("data, expected", [
    ({"model_type": "bart", "is_encoder_decoder": True}, True),
    ({"model_type": "bart"}, True),  # left out: BartConfig's own default
    ({"model_type": "bart", "is_encoder_decoder": False}, False),  # the file's word wins
    ({"model_type": "llava", "text_config": {"model_type": "t5"}}, True),
    ({"model_type": "llama"}, False),
    ({"model_type": "my_remote_model"}, False),
])
def test_encoder_decoder_is_read_from_the_file_else_from_its_config_class(data, expected):
    assert is_encoder_decoder(data) is expected
