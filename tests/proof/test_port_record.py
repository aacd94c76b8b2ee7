"""What the port's proof says when its tiny model cannot be built (proof/port_record.py): the
value a failed tiny build asks for, derived from the line that failed."""

from __future__ import annotations

from hyport_lib.proof.port_record import UNKNOWN, build_failure, config_fix, render


def test_a_key_read_from_a_config_field_names_the_field_with_the_key():
    line = "scaling_type = self.config.rope_scaling['type']"
    assert config_fix(KeyError("type"), line, {}) == {"rope_scaling": {"type": "dynamic", "factor": 2.0}}
    # a field with no typical value: what the build was given, the missing key added
    line = 'n = config.vision_config["patch"]'
    assert config_fix(KeyError("patch"), line, {"vision_config": {"depth": 2}}) == {
        "vision_config": {"depth": 2, "patch": UNKNOWN}}
    # a key the line does not read from a config: nothing to derive
    assert config_fix(KeyError("type"), "kind = table['type']", {}) is None
    assert config_fix(KeyError(3), "x = config.layers[3]", {}) is None


def test_a_missing_attribute_of_the_config_names_it():
    exc = AttributeError("'OwnConfig' object has no attribute 'missing_field'")
    assert config_fix(exc, "self.width = config.missing_field", {}) == {"missing_field": UNKNOWN}
    assert config_fix(exc, "self.width = other.missing_field", {}) is None
    assert config_fix(ValueError("bad"), "x = config.a['b']", {}) is None


def test_the_message_is_written_as_each_place_sets_the_value():
    fix = {"rope_scaling": {"type": "dynamic", "factor": 2.0}}
    assert render("port_proof_config", fix) == (
        "port_proof_config={'rope_scaling': {'type': 'dynamic', 'factor': 2.0}}")
    assert render("--proof-config", fix) == (
        "--proof-config 'rope_scaling={\"type\": \"dynamic\", \"factor\": 2.0}'")
    text = build_failure("KeyError: 'type'", "port_proof_config", fix, {})
    assert text == ("the tiny model could not be built from your config (KeyError: 'type'); set "
                    "port_proof_config to override the config fields the build needs, e.g. "
                    "port_proof_config={'rope_scaling': {'type': 'dynamic', 'factor': 2.0}}")
    assert build_failure("ValueError: bad", "--proof-config", None, {}).endswith(
        "set --proof-config to override the config fields the build needs (the fields the model "
        "code reads from its config)")


def test_the_suggested_value_keeps_the_fields_the_user_already_set():
    """Setting the suggested value must not drop the user's other overrides; a field the fix
    sets anew replaces the user's value of it."""
    fix = {"rope_scaling": {"type": "dynamic", "factor": 2.0}}
    given = {"foo": 1, "rope_scaling": {"rope_type": "default"}}
    assert build_failure("KeyError: 'type'", "port_proof_config", fix, given).endswith(
        "e.g. port_proof_config={'foo': 1, 'rope_scaling': {'type': 'dynamic', 'factor': 2.0}}")
    assert build_failure("KeyError: 'type'", "--proof-config", fix, given).endswith(
        "e.g. --proof-config 'foo=1' --proof-config "
        "'rope_scaling={\"type\": \"dynamic\", \"factor\": 2.0}'")
