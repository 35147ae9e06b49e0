import pytest

from dialogrl.params import (
    Bool,
    DictOf,
    Float,
    Int,
    ListOf,
    ModelName,
    OneOf,
    Optional,
    ParameterError,
    Str,
    check_params,
    resolve_profile,
)

SPEC = {
    "profile": OneOf("smoke", "cpu", "gpu"),
    "seed": Int(min=0),
    "lr": Float(min=0, strict=True),
    "use_bf16": Bool(),
    "model": ModelName(),
    "max_turns": Optional(Int(min=1)),
    "personas": ListOf(Str(), min_len=1),
    "weights": DictOf(Float(min=0), keys=("goal", "turn")),
}
GOOD = dict(profile="cpu", seed=0, lr=1e-3, use_bf16=False, model="tiny-dond", max_turns=None,
            personas=["fair"], weights={"goal": 1.0})


def test_good_parameters_pass_through():
    assert check_params(GOOD, SPEC) == GOOD
    assert check_params({**GOOD, "seed": 3}, SPEC)["seed"] == 3


@pytest.mark.parametrize("name, value, needle", [
    ("profile", "gpux", "choose one of 'smoke', 'cpu', 'gpu'"),
    ("seed", -1, ">= 0"),
    ("seed", 1.5, "expected an int"),
    ("lr", 0.0, "> 0"),
    ("use_bf16", "yes", "True or False"),
    ("model", "tiny-nope", "embedded models: tiny-dond"),
    ("model", "not a model", "hub id"),
    ("model", "./no/such/folder", "no model folder"),
    ("max_turns", 0, ">= 1"),
    ("personas", [], "at least 1"),
    ("weights", {"goal": 1.0, "cheat": 2.0}, "unknown key"),
])
def test_bad_parameter_is_named_with_allowed_values(name, value, needle):
    with pytest.raises(ParameterError) as err:
        check_params({**GOOD, name: value}, SPEC)
    assert err.value.name.split("[")[0] == name
    assert repr(value) in str(err.value) and needle in str(err.value)


def test_missing_parameter():
    params = dict(GOOD)
    del params["seed"]
    with pytest.raises(ParameterError, match="'seed'.*missing"):
        check_params(params, SPEC)


def test_hub_ids_and_local_folders_are_model_names(tmp_path):
    assert check_params({"m": "Qwen/Qwen2.5-0.5B-Instruct"}, {"m": ModelName()})
    assert check_params({"m": str(tmp_path)}, {"m": ModelName()})


def test_resolve_profile_auto(tmp_path):
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "gpu.yaml").write_text("profile: gpu\nlr: 1.0e-4\n")
    ns = {"profile": "auto", "lr": 1e-3}
    assert resolve_profile(dict(ns), "nb", cuda=False, params_dir=tmp_path) == "cpu"
    assert resolve_profile(ns, "nb", cuda=True, params_dir=tmp_path) == "gpu" and ns == {"profile": "gpu", "lr": 1e-4}
    for named in ("smoke", "cpu", "gpu"):  # named profiles are left alone, even on a CUDA machine
        ns = {"profile": named, "lr": 1e-3}
        assert resolve_profile(ns, "nb", cuda=True, params_dir=tmp_path) == named and ns["lr"] == 1e-3
    with pytest.raises(ParameterError, match="does not exist"):
        resolve_profile({"profile": "auto"}, "other", cuda=True, params_dir=tmp_path)
    (tmp_path / "nb" / "gpu.yaml").write_text("profile: gpu\nlearning_rate: 1.0e-4\n")
    with pytest.raises(ParameterError, match="learning_rate"):
        resolve_profile({"profile": "auto", "lr": 1e-3}, "nb", cuda=True, params_dir=tmp_path)
