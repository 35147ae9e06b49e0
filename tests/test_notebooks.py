"""Notebook smoke harness: every notebooks/<stem>.ipynb runs end to end at its smoke profile.

For each notebook: it is committed without outputs, with a kernelspec and a `parameters` cell; params/<stem>/ holds
smoke.yaml and gpu.yaml whose keys are all real notebook parameters (papermill only warns on unknown ones); the smoke
run writes a summary.json with no NaN whose keys and value ranges are those the notebook promises (rates in [0, 1],
intervals ordered, verdicts from the allowed set), and its wall-clock times apart, in timings.json.
"""
import ast
import contextlib
import json
import os
from pathlib import Path

import nbformat
import papermill
import pytest

from dialogrl.claims import VERDICTS, rejudge
from dialogrl.reproduce import design_hash, notebook_parameters, profile_parameters
from dialogrl.rl.methods import papers
from dialogrl.run import read_jsonl

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "notebooks" / "00_example.ipynb"
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
# the fixture notebook keeps the harness itself tested while notebooks/ is still empty
CASES = [pytest.param(nb, REPO / "params", id=nb.stem, marks=pytest.mark.slow) for nb in NOTEBOOKS] + \
    [pytest.param(FIXTURE, FIXTURE.parents[1] / "params", id="fixture-00_example")]


def _strict_json(path: Path):
    def refuse(constant):
        raise ValueError(f"{path}: {constant} in JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.mark.parametrize("nb_path, params_dir", CASES)
def test_notebook_is_committed_clean(nb_path, params_dir):
    nb = nbformat.read(nb_path, as_version=4)
    assert nb.metadata.get("kernelspec"), "no kernelspec: papermill cannot run it"
    assert not [c for c in nb.cells if c.cell_type == "code" and c.outputs], "committed with outputs"
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    params = notebook_parameters(nb_path)
    assert {"seed", "run_dir", "resume", "profile"} <= set(params)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")   # an interrupted run can be resumed:
    assert "resume=resume)" in code and code.count("map_runs(") == \
        code.count('keep=run / "jobs")'), "every map_runs keeps its results in the run's jobs/ folder"
    # papermill reads the cell line by line and skips a line with a second "=" (say ">=" in its comment): such a
    # parameter is missing from `papermill --help-notebook` and a profile YAML naming it is refused
    cell = nb.cells[tagged[0]].source
    assigned = {t.id for node in ast.parse(cell).body if isinstance(node, ast.Assign) for t in node.targets}
    assert set(params) == assigned, f"papermill cannot read {sorted(assigned - set(params))}"
    for profile in ("smoke", "gpu", "colab"):  # the files exist and name only real parameters
        profile_parameters(nb_path, profile, params_dir)
    if (Path(params_dir) / nb_path.stem / "confirm.yaml").exists():   # a preregistered run's file (papers/PROTOCOL.md)
        assert profile_parameters(nb_path, "confirm", params_dir).get("profile") == "confirm"


@pytest.mark.parametrize("nb_path, params_dir", CASES)
def test_notebook_smoke_run_writes_a_summary(nb_path, params_dir, tmp_path):
    params = profile_parameters(nb_path, "smoke", params_dir)
    run_dir = tmp_path / "run"
    papermill.execute_notebook(str(nb_path), str(tmp_path / nb_path.name), cwd=str(REPO), progress_bar=False,
                               parameters={**params, "run_dir": str(run_dir)})
    summary = _strict_json(run_dir / "summary.json")
    assert summary, "empty summary.json"
    assert json.loads((run_dir / "config.json").read_text())["seed"] == params.get("seed", 0)
    assert (run_dir / "env.json").exists()
    if nb_path.stem in papers():   # a paper's notebook (not the harness's fixture): what every paper's run writes
        config = _strict_json(run_dir / "config.json")
        for record in read_jsonl(run_dir / "train_configs.jsonl"):   # the notebook's lr reaches every optimizer
            for adapter, path in record["paths"].items():
                assert path["lr"] == (config.get("sim_lr") or config["lr"] if adapter == "simulator"
                                      else config["lr"]), (record["trainer"], adapter, path)
        assert not {"seconds", "timings"} & set(summary), "wall-clock times belong in timings.json"
        assert _strict_json(run_dir / "timings.json")["seconds"] > 0
        if nb_path.stem in CHECKS:   # and what this paper's summary holds
            CHECKS[nb_path.stem](summary, params)
        # what `python -m dialogrl preregister` registers before a run is the hash the run records
        assert summary["preregistration"]["params_hash"] == design_hash(nb_path, "smoke", params_dir)
    if "counterparts" in summary:   # the design checks were kept before the run could be refused
        design = _strict_json(run_dir / "design_checks.json")
        assert design["counterparts"] == summary["counterparts"] and design["room"] == summary["room"]
    if os.environ.get("OMP_NUM_THREADS") == "1":   # as `serial_run` makes its runs
        SMOKE_RUNS[nb_path.stem] = (dict(params), run_dir)


# ------------------------------------------------------------------------------------ what each summary promises

def _interval(ci, where):
    assert isinstance(ci, list) and len(ci) == 2 and all(isinstance(x, float) for x in ci), f"{where}: {ci!r}"
    assert ci[0] <= ci[1], f"{where}: interval {ci} out of order"


def _estimate(table: dict, key: str, where: str, lo: float, hi: float):
    """table[key] a number in [lo, hi] with its interval table[key + '_ci'] ordered and around it."""
    assert lo <= table[key] <= hi, f"{where}.{key} = {table[key]} outside [{lo}, {hi}]"
    _interval(table[f"{key}_ci"], f"{where}.{key}_ci")
    assert table[f"{key}_ci"][0] <= table[key] + 1e-9 and table[key] <= table[f"{key}_ci"][1] + 1e-9


def _claims(summary: dict, n_seeds: int):
    """Every claim has its paired interval and a verdict that dialogrl.claims computes from its own numbers."""
    claims = summary["claims"]
    assert claims
    for name, c in claims.items():
        assert {"diff", "ci", "verdict", "games", "checks"} <= set(c) and "holds" not in c, name
        _interval(c["ci"], name)
        assert c["verdict"] in VERDICTS and c["games"] > 0, name
        if "seeds" in c:
            assert c["seeds"] == n_seeds, f"{name}: {c['seeds']} seeds paired, expected {n_seeds}"
    assert rejudge(summary) == {k: c["verdict"] for k, c in claims.items()}


def _manipulation(checks: dict, methods: list[str]):
    """A manipulation check per trained method: its gain with an interval, moved, the threshold (a quarter of the
    room to its ceiling, attainable where a reference policy was measured), passed or not."""
    assert set(methods) <= set(checks), f"checks missing: {sorted(set(methods) - set(checks))}"
    for m in methods:
        c = checks[m]
        _interval(c["ci"], f"manipulation.{m}")
        assert c["threshold"] == pytest.approx(max(0.0, 0.25 * (c["ceiling"] - c["base"])))
        assert c["ceiling_kind"] == ("nominal" if c["reference"] is None else "attainable"), m
        assert c["moved"] == (c["ci"][0] > 0), m
        assert c["passed"] == (c["moved"] and c["gain"] >= c["threshold"]), m


def _counterparts(records: dict, kinds: int = 2):
    """Every counterpart's responsiveness record: its decision rate after each kind, the difference inside its
    interval, and `responds` as the rule says (dialogrl.room)."""
    assert records
    for name, r in records.items():
        assert 0 <= r["good"] <= 1 and 0 <= r["bad"] <= 1 and r["diff"] == pytest.approx(r["good"] - r["bad"]), name
        _interval(r["ci"], f"counterparts.{name}")
        assert r["responds"] == (r["diff"] >= r["gap"] and r["ci"][0] > 0) and len(r["kinds"]) == kinds, name


def _power(power: dict, n_seeds: int, claims: list[str]):
    """Each headline claim's power row: its MDE (None with one seed), the paper's effect, seeds and games."""
    assert set(claims) <= set(power), f"power rows missing: {sorted(set(claims) - set(power))}"
    for name in claims:
        p = power[name]
        assert p["seeds"] == n_seeds and p["games"] > 0, name
        assert (p["mde"] is None) == (n_seeds < 2) and (p["mde"] is None or p["mde"] >= 0), name
        if p["paper_effect"] is not None and p["mde"] is not None:
            assert p["detectable"] == (p["mde"] <= abs(p["paper_effect"])), name


def check_01(summary: dict, params: dict):
    n = params["n_seeds"]
    assert summary["seeds"] == n and summary["interval"].startswith("t over")
    for m in ("base", "static", "interactive", "calibrated"):
        _estimate(summary["score"], m, "score", 0.0, 10.0)
        _estimate(summary["agreement"], m, "agreement", 0.0, 1.0)
    cal = summary["calibration"]
    assert cal["nll_calibrated"] > 0 and all(cal[f"behaviour_distance_{k}"] >= 0
                                             for k in ("uncalibrated", "calibrated", "human_proxy"))
    for what in ("decision", "behaviour"):   # calibrated minus uncalibrated, per seed, with its t-interval
        change = cal[f"{what}_change"]
        assert len(change["per_seed"]) == change["seeds"] == n and change["happened"] in (True, False, None)
    assert {"human (held-out logs)", "uncalibrated", "calibrated", "human proxy"} <= {
        r["simulator"] for r in cal["acceptance"]}
    _claims(summary, n)
    _manipulation(summary["manipulation"], ["static", "interactive", "calibrated"])
    (did,) = summary["manipulation"]["calibrated"]["interventions"]   # the decision distance fell, over seeds
    assert did["value"] == cal["decision_change"]["diff"] and did["below"] == 0.0
    assert did["happened"] is cal["decision_change"]["happened"] is summary["manipulation"]["calibrated"][
        "intervention"]
    if summary["protocol"] == "offer":
        _counterparts(summary["counterparts"])
        assert {f"{s}-{k}" for s in ("uncalibrated", "calibrated") for k in range(n)} <= set(summary["counterparts"])
        assert set(summary["room"]) == {"uncalibrated", "calibrated", "static"}
    assert {"score.interactive_minus_static", "score.calibrated_minus_interactive",
            "mismatch.interactive_minus_base", "shift.quadratic_coef"} <= set(summary["claims"])
    _power(summary["power"], n, ["score.interactive_minus_static", "score.calibrated_minus_interactive",
                                 "score.static_minus_base"])
    shift = summary["shift"]
    assert shift["verdict"] in ("quadratic", "linear", "not shown")
    assert shift["bound_test"] in ("valid", "indicative") and shift["reward"] == "terminal"
    assert len(shift["gap"]) == len(shift["horizons"]) >= 4
    assert all(0 <= b <= 10.0 + 1e-9 for b in shift["bound"]), "the terminal bound is at most R_max"
    assert shift["min_detectable_quadratic"] >= 0
    for per_turn in shift["per_turn"].values():
        assert all(0 <= x <= 1 for x in per_turn), "a TV lower bound lies in [0, 1]"


def check_04(summary: dict, params: dict):
    n = params["n_seeds"]
    assert summary["seeds"] == n and summary["interval"].startswith("t over")
    ranges = {"success_at_1": (0.0, 1.0), "agreement": (0.0, 1.0), "score": (0.0, 10.0)}
    methods = {"telesales": ["base", "unilateral-seller", "ibrl", "shared"],
               "dond": ["base", "unilateral-A", "unilateral-B", "ibrl", "shared"]}
    for task in ("telesales", "dond"):
        keys = ["success_at_1"] if task == "telesales" else ["agreement", "score"]
        for key in keys:
            for m in methods[task]:
                _estimate(summary[task][key], m, f"{task}.{key}", *ranges[key])
            for other in methods[task][:-2] + ["shared"]:
                assert f"{task}.{key}.ibrl_minus_{other}" in summary["claims"]
    _claims(summary, n)
    for task in ("telesales", "dond"):
        _manipulation(summary["manipulation"][task], [m for m in methods[task] if m != "base"])
        _counterparts(summary["counterparts"][task])
    assert {f"warm-start-{k}" for k in range(n)} <= set(summary["counterparts"]["telesales"])
    assert {f"warm-start-0@{r}" for r in "AB"} <= set(summary["counterparts"]["dond"])
    room = summary["room"]["telesales"]["seller"]
    assert room["reference"] in room["references"] and room["ceiling"] == room["references"][room["reference"]]["mean"]
    assert summary["manipulation"]["telesales"]["ibrl"]["intervention"] in (True, False)   # the buyer changed?
    buyer = summary["manipulation"]["telesales"]["ibrl.buyer"]   # its own draw of scenarios, its own size
    assert buyer["games"] == n * params["counterpart_check_scenarios"] != n * params["eval_scenarios"]
    assert "mismatch.telesales.unilateral-seller_minus_base" in summary["claims"]
    _power(summary["power"], n, ["telesales.success_at_1.ibrl_minus_unilateral-seller",
                                 "dond.agreement.ibrl_minus_unilateral-A", "dond.agreement.ibrl_minus_unilateral-B"])
    seller = summary["power"]["telesales.success_at_1.ibrl_minus_unilateral-seller"]
    assert seller["paper_effect"] == pytest.approx(0.05)
    for method, row in summary["mismatch"].items():
        for task in ("telesales", "dond"):
            if task in row:
                _interval(row[f"{task}_ci"], f"mismatch.{method}.{task}")
                if method != "base":
                    _interval(row[f"{task}_minus_base_ci"], f"mismatch.{method}.{task}_minus_base")


def check_03(summary: dict, params: dict):
    n = params["n_seeds"]
    methods = params["methods"] if "methods" in params else ["base", "single", "single_hot", "vs", "ensemble",
                                                              "cotrain", "population"]
    assert summary["seeds"] == n and summary["interval"].startswith("t over") and len(summary["panel"]) >= 3
    for m in methods:
        _estimate(summary["heldout"]["success"], m, "heldout.success", 0.0, 1.0)
        _estimate(summary["heldout"]["reward"], m, "heldout.reward", -1.0, 1.0)
        for measure, (lo, hi) in {"distinct_1": (0, 1), "distinct_2": (0, 1), "coverage": (0, 1),
                                  "strategy_entropy": (0, 4)}.items():
            _estimate(summary["diversity"][measure], m, f"diversity.{measure}", lo, hi)
    for m in [m for m in methods if m != "base"]:
        assert m in summary["collapse"]["train"] and m in summary["collapse"]["heldout"]
    sims = summary["collapse"]["simulators"]
    assert all(0 < sims[f"top1/{s}"] <= 1 for s in ("reference", "single", "vs"))
    assert 0 <= sims["vs_unusable_rate"] <= 1 and 0 <= summary["vs"]["fallback_rate"] <= 1
    _claims(summary, n)
    _manipulation(summary["manipulation"], [m for m in methods if m != "base"])
    _counterparts(summary["counterparts"])
    assert {f"{sim}-{k}" for sim in ("single", "vs", "reference") for k in range(n)} <= set(summary["counterparts"])
    assert set(summary["room"]) == {"single", "single_hot", "vs", "ensemble", "reference"}
    assert summary["manipulation"]["vs"]["intervention"] in (True, False)
    assert summary["manipulation"]["cotrain"]["reference"] == summary["room"]["reference"]["reference"]
    assert summary["claims"]["success.vs_minus_single_hot"]["effect_kind"] == "up to"   # VS alone, one temperature
    assert {"success.vs_minus_single", "success.cotrain_minus_single", "success.population_minus_cotrain",
            "diversity.strategy_entropy.vs_minus_single", "mismatch.single_minus_base"} <= set(summary["claims"])
    assert set(summary["mismatch"]) == {"single", "single_hot", "vs", "ensemble"}
    _power(summary["power"], n, ["success.vs_minus_single", "success.cotrain_minus_single"])
    assert summary["power"]["success.vs_minus_single"]["paper_effect"] == pytest.approx(0.09)


def check_02(summary: dict, params: dict):
    n = params["n_seeds"]
    methods = params.get("methods", ["base", "single_turn", "outcome_ppo", "socialrl", "socialrl_grpo", "uniform",
                                     "manual"])
    assert summary["seeds"] == n and summary["interval"].startswith("t over") and len(summary["panel"]) >= 3
    for m in methods:
        _estimate(summary["goal"], m, "goal", 0.0, 1.0)
        _estimate(summary["goal_score"], m, "goal_score", 0.0, 10.0)
        _estimate(summary["relationship"], m, "relationship", -5.0, 5.0)
    assert set(summary["ablation"]) == {"dynamic", "uniform", "manual"}
    assert summary["ablation"]["dynamic"] == summary["goal"]["socialrl"]
    if summary["sotopia_data"] is not None:   # the judges against GPT-4 on the stored episodes (shared/ data)
        scored = summary["judge"]["scored"]
        assert set(scored) == set(params.get("judge_validation_models", ["smollm2-135m-instruct"]))
        for table in [summary["judge"], *scored.values()]:
            for key in ("goal_spearman", "relationship_spearman"):
                assert table[key] is None or -1 <= table[key] <= 1, key
        assert summary["judge"]["sides"] == 2 * params.get("judge_validation_episodes", 28)
    _claims(summary, n)
    _manipulation(summary["manipulation"], [m for m in methods if m != "base"])
    _counterparts(summary["counterparts"])
    assert {f"train-{k}" for k in range(n)} <= set(summary["counterparts"])
    assert summary["manipulation"]["socialrl"]["reference"] == summary["room"]["agent"]["reference"]
    assert "intervention" in summary["manipulation"]["socialrl"] and "intervention" not in summary["manipulation"][
        "outcome_ppo"]   # only a process reward has one: it told a group's dialogues apart
    headline = [f"goal.{c}" for c in ("socialrl_minus_base", "socialrl_minus_outcome_ppo",
                                      "socialrl_minus_single_turn", "socialrl_minus_socialrl_grpo",
                                      "dynamic_minus_uniform", "dynamic_minus_manual")]
    assert set(headline) | {"relationship.socialrl_minus_base"} <= set(summary["claims"])
    _power(summary["power"], n, headline)
    assert summary["power"]["goal.socialrl_minus_base"]["paper_effect"] == pytest.approx(0.092)
    for m in ("socialrl", "manual", "uniform"):   # every stage's weights sum to 1
        for stage, w in summary["weights"][m].items():
            assert sum(w.values()) == pytest.approx(1.0), (m, stage)


CHECKS = {"01_calibrated_interactive_rl": check_01, "02_socialrl": check_02, "03_scope_simulator_collapse": check_03,
          "04_ibrl_bilateral": check_04}


# the settings of the runs that parallel and resumed runs are held to: notebook 04's TeleSales half, where the packaged
# buyer plays (its streams must not depend on the process either), and notebook 01's smoke run as it is (its per-cap
# training runs too)
SERIAL_CASES = {"04_ibrl_bilateral": {"tasks": ["telesales"], "ablation": False, "eval_scenarios": 2},
                "01_calibrated_interactive_rl": {}}
# the smoke runs this process made with one thread: {stem: (parameters, run folder)}; a serial run of the same
# parameters is that run (conftest runs 01's smoke and parallel tests on one worker, in that order)
SMOKE_RUNS: dict[str, tuple[dict, Path]] = {}


def _case_parameters(stem: str, run_dir: Path, **more) -> dict:
    nb_path = REPO / "notebooks" / f"{stem}.ipynb"
    return {**profile_parameters(nb_path, "smoke", REPO / "params"), **SERIAL_CASES[stem], "run_dir": str(run_dir),
            **more}


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    """serial_run(stem): the run folder of SERIAL_CASES[stem] run in one process with one thread, made once per
    module (the kernel's torch starts with one thread: parallel workers have one, and CPU kernels may add in another
    order with another number of threads)."""
    runs = {}

    def get(stem: str) -> Path:
        case = {k: v for k, v in _case_parameters(stem, Path(), processes=1).items() if k != "run_dir"}
        if stem not in runs and SMOKE_RUNS.get(stem, (None,))[0] == case:
            runs[stem] = SMOKE_RUNS[stem][1]
        if stem not in runs:
            folder = tmp_path_factory.mktemp(f"serial-{stem[:2]}")
            with pytest.MonkeyPatch.context() as m:
                m.setenv("OMP_NUM_THREADS", "1")
                papermill.execute_notebook(str(REPO / "notebooks" / f"{stem}.ipynb"), str(folder / "serial.ipynb"),
                                           cwd=str(REPO), progress_bar=False,
                                           parameters=_case_parameters(stem, folder / "run", processes=1))
            runs[stem] = folder / "run"
        return runs[stem]
    return get


def _same_run(a: Path, b: Path) -> None:
    """Two run folders hold the same results: summary, games and transcripts byte for byte, and the same logged rows
    (metrics and trainer configurations; their order and wall-clock times, `time` and `time/...`, aside)."""
    for name in ("summary.json", "games.csv", "transcripts.jsonl"):
        assert (a / name).read_text() == (b / name).read_text(), name
    for name in ("metrics.jsonl", "train_configs.jsonl"):
        rows = [sorted(json.dumps({k: v for k, v in row.items() if k.split("/")[0] != "time"}, sort_keys=True)
                       for row in read_jsonl(run / name)) for run in (a, b)]
        assert rows[0] == rows[1], name


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["01_calibrated_interactive_rl"])   # notebook 04's: the killed run's resume below
def test_notebook_parallel_runs_give_the_serial_results(stem, serial_run, tmp_path):
    """`processes=2` runs the training runs in two one-thread worker processes: the same games, transcripts, logged
    rows and summary as one process running them one after another with one thread. Notebook 01's compounding check
    reuses the seed-0 interactive policy, whose adapter weights come back from its worker."""
    nb_path = REPO / "notebooks" / f"{stem}.ipynb"
    papermill.execute_notebook(str(nb_path), str(tmp_path / "2.ipynb"), cwd=str(REPO), progress_bar=False,
                               parameters=_case_parameters(stem, tmp_path / "run", processes=2))
    _same_run(serial_run(stem), tmp_path / "run")


def _descendants(pid: int) -> list[int]:
    """The processes below `pid` (Linux /proc)."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        out, todo = out + below, todo + below
    return out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the kernel's processes in Linux's /proc")
def test_a_notebook_killed_mid_way_resumes_to_the_uninterrupted_results(serial_run, tmp_path):
    """Notebook 04 (SERIAL_CASES) is killed, papermill, kernel and all, as a power cut would, once its first training
    run is saved and the second is under way; `resume=<its run folder>` finishes it to the summary, games, transcripts
    and logged rows of the uninterrupted serial run. The resume runs the other three training runs in two one-thread
    workers (`processes` may change on a resume): this is also notebook 04's parallel test."""
    import signal
    import subprocess
    import sys
    import time

    stem = "04_ibrl_bilateral"
    run, nb_path = tmp_path / "run", REPO / "notebooks" / f"{stem}.ipynb"
    args = tmp_path / "args.json"
    args.write_text(json.dumps([str(nb_path), str(tmp_path / "killed.ipynb"),
                                _case_parameters(stem, run, processes=1)]))
    code = ("import json, sys, papermill; nb, out, p = json.load(open(sys.argv[1])); "
            "papermill.execute_notebook(nb, out, parameters=p, progress_bar=False)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(args)], cwd=REPO, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 600
        while not list((run / "jobs").glob("job-*.pkl")) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before its first training run was saved"
        time.sleep(2)   # the second training run is under way
    finally:
        for pid in _descendants(proc.pid) + [proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
    assert not (run / "summary.json").exists() and len(list((run / "jobs").glob("job-*.pkl"))) == 1
    with pytest.MonkeyPatch.context() as m:
        m.setenv("OMP_NUM_THREADS", "1")
        papermill.execute_notebook(str(nb_path), str(tmp_path / "resumed.ipynb"), cwd=str(REPO), progress_bar=False,
                                   parameters=_case_parameters(stem, run, processes=2, resume=str(run)))
    assert "resuming" in (tmp_path / "resumed.ipynb").read_text() and not (run / "jobs").exists()
    _same_run(serial_run(stem), run)


@pytest.mark.slow
def test_notebook_01_runs_on_the_real_human_logs(shared_data, tmp_path):
    """Notebook 01 with `human_logs`: the selection protocol, a warm start and a human proxy built on disjoint
    splits of the real Deal or No Deal dialogues (200 of them here; toy sizes, the numbers mean nothing). The
    compounding check's per-cap training path is the smoke run's; here it evaluates one policy, as the cpu default."""
    nb_path = REPO / "notebooks" / "01_calibrated_interactive_rl.ipynb"
    params = profile_parameters(nb_path, "smoke", REPO / "params")
    run_dir = tmp_path / "run"
    papermill.execute_notebook(str(nb_path), str(tmp_path / nb_path.name), cwd=str(REPO), progress_bar=False,
                               parameters={**params, "run_dir": str(run_dir),
                                           "human_logs": str(shared_data / "dealnodeal"),
                                           "human_logs_limit": 200, "human_model_epochs": 1.0,
                                           "train_each_horizon": False})
    summary = _strict_json(run_dir / "summary.json")
    assert summary["protocol"] == "selection" and summary["n_train_logs"] == 120
    check_01(summary, params)
    assert summary["shift"]["bound_test"] == "indicative"
    records = [json.loads(line) for line in (run_dir / "transcripts.jsonl").read_text().splitlines()]
    assert any(t["phase"] == "select" for r in records for t in r["turns"])  # games end with both selections
