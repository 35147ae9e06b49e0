import ast
import re
from pathlib import Path

import nbformat
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
    check_values,
    load_yaml,
    parse_value,
    resolve_profile,
)

REPO = Path(__file__).resolve().parents[1]

SPEC = {
    "profile": OneOf("smoke", "cpu", "gpu", "colab"),
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
    ("profile", "gpux", "choose one of 'smoke', 'cpu', 'gpu', 'colab'"),
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
    (tmp_path / "nb" / "colab.yaml").write_text("profile: colab\nlr: 2.0e-4\n")
    for gib, profile in ((79.2, "gpu"), (40.0, "gpu"), (14.7, "colab"), (0, "cpu")):   # an H100, a T4, none
        assert resolve_profile({"profile": "auto", "lr": 1e-3}, "nb", cuda=gib, params_dir=tmp_path) == profile
    with pytest.raises(ParameterError, match="does not exist"):
        resolve_profile({"profile": "auto"}, "other", cuda=True, params_dir=tmp_path)
    (tmp_path / "nb" / "gpu.yaml").write_text("profile: gpu\nlearning_rate: 1.0e-4\n")
    with pytest.raises(ParameterError, match="learning_rate"):
        resolve_profile({"profile": "auto", "lr": 1e-3}, "nb", cuda=True, params_dir=tmp_path)


def test_a_named_profile_applies_its_file_and_explicit_parameters_win(tmp_path):
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "smoke.yaml").write_text("profile: smoke\nlr: 1.0\nsteps: 2\n")
    cell = {"profile": "smoke", "lr": 1e-3, "steps": 60, "seed": 0}
    ns = dict(cell)
    assert resolve_profile(ns, "nb", cuda=True, params_dir=tmp_path, passed=set()) == "smoke"
    assert ns == {**cell, "lr": 1.0, "steps": 2}             # the file's values over the cell's, on any machine
    ns = {**cell, "steps": 5}
    resolve_profile(ns, "nb", params_dir=tmp_path, passed={"profile", "steps"})
    assert ns == {**cell, "lr": 1.0, "steps": 5}             # papermill -p steps 5 wins over the file
    ns = {**cell, "profile": "cpu"}
    assert resolve_profile(ns, "nb", params_dir=tmp_path, passed=set()) == "cpu" and ns == {**cell, "profile": "cpu"}
    with pytest.raises(ParameterError, match="does not exist"):
        resolve_profile({**cell, "profile": "gpu"}, "nb", params_dir=tmp_path, passed=set())


def test_a_profile_that_is_not_yaml_or_not_a_mapping_is_named_with_its_line(tmp_path):
    (tmp_path / "nb").mkdir()
    bad = tmp_path / "nb" / "gpu.yaml"
    bad.write_text("steps: 2\nlr: [1e-3\nseed: 0\n")
    with pytest.raises(ValueError, match=r"nb/gpu.yaml is not valid YAML at line \d+, column \d+"):
        resolve_profile({"profile": "gpu", "steps": 1, "lr": 0.1, "seed": 0}, "nb", params_dir=tmp_path, passed=set())
    bad.write_text("- steps\n- 2\n")
    with pytest.raises(ValueError, match="gpu.yaml: expected a mapping of parameter names to values, found a list"):
        load_yaml(bad)


def test_command_line_values_are_literals_or_words_and_are_checked_before_a_run(tmp_path):
    assert parse_value("steps", "60") == 60 and parse_value("lr", "1e-3") == 1e-3
    assert parse_value("report_to", "tensorboard") == "tensorboard"
    assert parse_value("model", "HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    with pytest.raises(ParameterError, match="'steps' = '1e' is not allowed: not a Python literal"):
        parse_value("steps", "1e")
    cell = {"steps": 60, "lr": 1e-3, "model": "tiny-dond", "max_turns": None}
    check_values({"steps": 5, "lr": 1, "max_turns": 3}, cell, "nb.ipynb")   # an int where a float is: fine
    with pytest.raises(ValueError, match=r"\['stepz'\] are not parameters of nb.ipynb \(its parameters: steps, lr"):
        check_values({"stepz": 1}, cell, "nb.ipynb")
    with pytest.raises(ParameterError, match="'steps' = 'many'"):
        check_values({"steps": "many"}, cell, "nb.ipynb")
    from dialogrl.__main__ import main

    assert main(["demo", "-p", "stepz", "1", "--results", str(tmp_path)]) == 2   # before any run folder is made
    assert main(["demo", "-p", "steps", "1e", "--results", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())


def test_papermill_parameters_are_read_from_the_injected_cell(tmp_path):
    """Run under papermill: the names papermill passed are found in the kernel's history, and they win."""
    import json

    import nbformat
    import papermill

    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "smoke.yaml").write_text("profile: smoke\nlr: 1.0\nsteps: 2\n")
    cell = nbformat.v4.new_code_cell('profile = "auto"\nlr = 1e-3\nsteps = 60')
    cell.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[cell, nbformat.v4.new_code_cell(
        "import json\nfrom dialogrl.params import papermill_parameters, resolve_profile\n"
        f"resolve_profile(globals(), 'nb', params_dir={str(tmp_path)!r})\n"
        "print(json.dumps([sorted(papermill_parameters()), profile, lr, steps]))")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "in.ipynb")
    papermill.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), progress_bar=False,
                               parameters={"profile": "smoke", "steps": 5}, cwd=str(tmp_path))
    text = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[-1].outputs[-1]["text"]
    assert json.loads(text.strip().splitlines()[-1]) == [["profile", "steps"], "smoke", 1.0, 5]


def test_a_judge_model_that_is_also_a_heldout_counterpart_is_refused(tmp_path):
    from dialogrl.params import check_judge_independent, model_identity

    check_judge_independent(None, ["Qwen/Qwen2.5-1.5B-Instruct"])                        # no LLM judge
    check_judge_independent("Qwen/Qwen2.5-1.5B-Instruct", ["Qwen/Qwen2.5-0.5B-Instruct", "tiny-social-alt"])
    with pytest.raises(ParameterError, match=r"heldout_models\[1\] = 'qwen/Qwen2.5-1.5B-instruct'") as err:
        check_judge_independent("Qwen/Qwen2.5-1.5B-Instruct", ["tiny-social-alt", "qwen/Qwen2.5-1.5B-instruct"])
    assert isinstance(err.value, ValueError) and err.value.name == "judge_model"
    # a local folder is compared by its resolved path, a hub cache snapshot by its hub id
    folder = tmp_path / "judge"
    folder.mkdir()
    with pytest.raises(ParameterError):
        check_judge_independent(str(folder), [str(tmp_path / "." / "judge")])
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-1.5B-Instruct" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    assert model_identity(str(snapshot)) == "qwen/qwen2.5-1.5b-instruct"
    with pytest.raises(ParameterError, match="held-out counterpart"):
        check_judge_independent(str(snapshot), ["Qwen/Qwen2.5-1.5B-Instruct"])


@pytest.mark.parametrize("profile", sorted(Path(__file__).parents[1].glob("params/*/gpu.yaml")),
                         ids=lambda p: p.parent.name)
def test_gpu_profiles_judge_with_a_model_no_heldout_counterpart_plays(profile):
    import yaml

    from dialogrl.params import check_judge_independent

    values = yaml.safe_load(profile.read_text()) or {}
    heldout = [*values.get("heldout_models", []), *values.get("heldout_packaged", [])]
    check_judge_independent(values.get("judge_model"), heldout)
    check_judge_independent(values.get("partner_model"), heldout, name="partner_model")


CELL = {"profile": "auto", "seed": 0, "lr": 1e-3, "steps": 20, "bf16": False, "model": "tiny-dond",
        "personas": ["fair", "greedy"], "seeds": [1, 2], "extra_models": [], "run_dir": None, "data": "../shared"}
DECLARED = {"model extra_models": ModelName(), "personas": OneOf("fair", "greedy"), "run_dir": Str(),
            "data": Optional(Str()), "seed": ">= 0", "steps seeds": ">= 1", "lr": "> 0, <= 1"}


def test_types_come_from_the_cell_literals():
    values = {**CELL, "lr": 1, "extra_models": ["Qwen/Qwen2.5-0.5B-Instruct"], "run_dir": "out", "data": None}
    out = check_params(values, DECLARED, cell=CELL)
    assert list(out) == list(CELL) and out["lr"] == 1.0 and isinstance(out["lr"], float)   # a float takes an int
    for name, value, needle in [("steps", 2.0, "expected an int"), ("steps", 0, ">= 1"), ("lr", 0.0, "> 0"),
                                ("lr", 2.0, "<= 1"), ("bf16", 1, "True or False"), ("seeds", [1, 0], ">= 1"),
                                ("personas", ["fair", "kind"], "choose one of"), ("seeds", 1, "expected a list"),
                                ("extra_models", ["tiny-nope"], "tiny"), ("profile", "", "non-empty")]:
        with pytest.raises(ParameterError) as err:
            check_params({**CELL, name: value}, DECLARED, cell=CELL)
        assert err.value.name.split("[")[0] == name and needle in str(err.value), (name, str(err.value))


@pytest.mark.parametrize("declared, needle", [
    ({"nope": ">= 0"}, "not parameters of the cell"),
    ({"seed": ">= 0", "seed lr": "> 0"}, "declared twice"),
    ({"run_dir": ">= 0"}, "its literal is None"),
    ({"profile": ">= 0"}, "a range for a str"),
    ({"seed": "at least 0"}, "'<op> <number>'"),
])
def test_a_declaration_the_cell_contradicts_is_refused(declared, needle):
    with pytest.raises(ValueError, match=needle):
        check_params(CELL, {**{k: v for k, v in DECLARED.items() if k not in ("run_dir", "seed")}, **declared},
                     cell=CELL)
    with pytest.raises(ValueError, match="empty list literal"):
        check_params(CELL, {"run_dir": Str()}, cell=CELL)


def _check_cell(nb_path: Path) -> str:
    cells = [c.source for c in nbformat.read(nb_path, 4).cells if re.search(r"^params = \S+\(globals\(\)", c.source,
                                                                            re.M)]
    assert len(cells) == 1, f"{nb_path.name}: one cell checks the parameters"
    return cells[0]


NOTEBOOKS = sorted(REPO.glob("notebooks/*.ipynb")) + sorted(REPO.glob("notebooks/*/*.ipynb"))


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_checks_its_cell_and_profiles(nb_path):
    """Each notebook's checking cell, run on its own parameters cell's values and on each profile's file, passes:
    every parameter is checked (types from the literals), and no profile sets a value its checks refuse."""
    from dialogrl.params import cell_literals

    literals, source = cell_literals(nb_path.stem), _check_cell(nb_path)
    profiles = ["cpu", "smoke", "gpu", "colab"] if "profile" in literals else [None]
    for profile in profiles:
        namespace = {**literals, **({"profile": profile} if profile else {})}
        exec(source, namespace)
        assert set(namespace["params"]) == set(literals), profile


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_notebook_name_shadows_a_parameter(nb_path):
    """No import, function or class of a notebook's code cells takes a parameter's name: notebook 02 imported
    `judge` (a claims function) after its parameter `judge`, so that `judge == "llm"` was always False and its gpu and
    colab profiles' LLM judge silently became the rule judge."""
    from dialogrl.params import cell_literals

    literals = cell_literals(nb_path.stem if nb_path.parent.name == "notebooks" else str(nb_path.relative_to(REPO)))
    bound = set()
    for cell in nbformat.read(nb_path, 4).cells:
        if cell.cell_type != "code" or "parameters" in cell.metadata.get("tags", []):
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                bound.add(node.name)
    assert not bound & set(literals), f"{nb_path.name} binds parameter names: {sorted(bound & set(literals))}"
