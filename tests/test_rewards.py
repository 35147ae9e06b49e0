"""Process rewards: the weight sanitiser, the schedules, the turn rewards handed to the trainer, and the judges'
interface (the rule judge, and the LLM judge's parser, failure counting and fallback, with a real tiny model)."""
import json
import math

import pytest

from conftest import play_texts
from dialogrl.envs.social import PARTNERS, TRAIN_SCENES, ScriptedAgent, SocialScenario, SocialScenes, population
from dialogrl.envs.social.judge import RuleJudge
from dialogrl.rewards import (
    DIMENSIONS,
    MANUAL_SCHEDULE,
    UNIFORM,
    WEIGHT_CAP,
    LLMJudge,
    ProcessReward,
    parse_judgement,
    sanitize_weights,
    schedule_weights,
    varied_within_groups,
    weights_table,
)
from dialogrl.rollout import Episode, play

TASK = SocialScenes()
SC = SocialScenario(TRAIN_SCENES["car"], PARTNERS["warm"], mood=0.0, id=1)


def ok(w):
    return len(w) == len(DIMENSIONS) and math.isclose(sum(w), 1.0) and all(0 <= x <= WEIGHT_CAP + 1e-9 for x in w)


@pytest.mark.parametrize("raw", [None, "0.5, 0.5", [0.2] * 6, {}, {d: 0 for d in DIMENSIONS},
                                 {"charm": 1.0, "wit": 2.0}, {d: -1.0 for d in DIMENSIONS},
                                 {d: float("nan") for d in DIMENSIONS}, {d: True for d in DIMENSIONS},
                                 {d: "0.3" for d in DIMENSIONS}])
def test_degenerate_proposals_fall_back_to_the_stage_prior(raw):
    for stage in ("early", "mid", "late"):
        w, fallback = sanitize_weights(raw, stage)
        assert fallback and w == pytest.approx(MANUAL_SCHEDULE[stage]) and ok(w)


def test_sanitiser_whitelists_clips_caps_redistributes_and_normalises():
    w, fallback = sanitize_weights({"goal_advancement": 2.0, "turn_quality": 2.0, "charm": 50.0,
                                    "relational_attunement": -3.0}, "mid")
    assert not fallback and w == pytest.approx([0.5, 0, 0, 0, 0, 0.5]) and ok(w)
    # one dimension asks for everything: capped at WEIGHT_CAP, the rest shared equally by the zero-weight others
    w, _ = sanitize_weights({"goal_advancement": 1.0}, "late")
    assert w[0] == pytest.approx(WEIGHT_CAP) and w[1:] == pytest.approx([(1 - WEIGHT_CAP) / 5] * 5) and ok(w)
    # excess goes to the uncapped dimensions in proportion to their weights
    w, _ = sanitize_weights({"goal_advancement": 8, "strategic_positioning": 1, "turn_quality": 1}, "early")
    assert w == pytest.approx([0.5, 0.25, 0, 0, 0, 0.25]) and ok(w)
    w, _ = sanitize_weights(dict(zip(DIMENSIONS, [3, 1, 1, 1, 1, 1])), "early")
    assert w == pytest.approx([3 / 8, 1 / 8, 1 / 8, 1 / 8, 1 / 8, 1 / 8]) and ok(w)   # under the cap: untouched
    with pytest.raises(ValueError, match="stage"):
        sanitize_weights({}, "middle")
    with pytest.raises(ValueError, match="cap"):
        sanitize_weights({}, "early", cap=0.1)


def test_the_manual_schedule_is_the_papers():
    assert MANUAL_SCHEDULE["early"] == (0.10, 0.10, 0.30, 0.15, 0.20, 0.15)
    assert MANUAL_SCHEDULE["late"] == (0.30, 0.25, 0.10, 0.15, 0.10, 0.10)
    assert all(math.isclose(sum(w), 1.0) for w in MANUAL_SCHEDULE.values())
    j = RuleJudge().judge(TASK, play_texts(TASK, SC, ["hi! how are you?", "fine."]))[0]
    assert schedule_weights("uniform", j) == (UNIFORM, False)
    assert schedule_weights("manual", j) == (MANUAL_SCHEDULE[j.stage], False)
    with pytest.raises(ValueError, match="schedule"):
        schedule_weights("weekly", j)


def _episode(state):
    return Episode(state, {"agent": "a", "partner": "b"}, TASK.outcome(state))


def test_process_reward_is_the_weighted_pass_rate_per_turn_and_records_it():
    state = play_texts(TASK, SC, ["hi! how are you doing?", "fine.", "come on, you have to lend me your car", "no.",
                                  "i know you need the car on monday. could you lend me your car for the weekend?",
                                  "ok [AGREE]", "thank you so much!"])
    for schedule in ("dynamic", "manual", "uniform"):
        pr = ProcessReward(RuleJudge(), TASK, schedule=schedule, coef=0.3, credit_early_end=False)
        r = pr(_episode(state), "agent")
        records = pr.drain()
        assert len(r) == len(records) == 4 and pr.records == []
        for x, rec in zip(r, records):
            w = [rec[f"weight/{d}"] for d in DIMENSIONS]
            assert x == pytest.approx(0.3 * sum(wi * rec[f"score/{d}"] for wi, d in zip(w, DIMENSIONS)))
            assert ok(w) or schedule == "manual"
        assert r[2] > r[1]     # the pressing turn scores below the acknowledging ask
        assert pr(_episode(state), "partner") == [0.0] * 3   # the partner's turns: no process reward
    assert weights_table(records)["late"] == pytest.approx(dict(zip(DIMENSIONS, UNIFORM)))
    assert {(rec["scenario"], rec["game"]) for rec in records} == {(SC.id, None)}   # which dialogue each came from


def test_varied_within_groups_counts_the_groups_whose_dialogues_the_process_reward_tells_apart():
    def rec(scenario, game, process):
        return {"scenario": scenario, "game": game, "process": process}
    same = [rec(0, 1, 0.2), rec(0, 1, 0.1), rec(0, 2, 0.3)]        # both dialogues of group 0 total 0.3
    apart = [rec(1, 3, 0.2), rec(1, 4, 0.5)]                       # group 1's differ
    assert varied_within_groups(same + apart) == 0.5 and varied_within_groups(apart) == 1.0
    assert math.isnan(varied_within_groups([rec(2, 5, 0.1)]))      # no group of two dialogues
    with pytest.raises(ValueError, match="schedule"):
        ProcessReward(RuleJudge(), TASK, schedule="weekly")


def test_an_early_end_credits_its_saved_turns_at_the_close():
    """An agreement after two exchanges saves three of the five agent turns: the closing turn is paid four times, so
    that talking on is never worth more than closing."""
    state = play_texts(TASK, SC, ["hi! could you lend me your car?", "ok [AGREE]", "thank you so much!"])
    plain = ProcessReward(RuleJudge(), TASK, credit_early_end=False)(_episode(state), "agent")
    credited = ProcessReward(RuleJudge(), TASK)(_episode(state), "agent")
    assert credited[0] == plain[0] and credited[1] == pytest.approx(plain[1] * (1 + 5 - 2))
    capped = play_texts(TASK, SC, ["hi"] * 10)
    assert ProcessReward(RuleJudge(), TASK)(_episode(capped), "agent") == \
        ProcessReward(RuleJudge(), TASK, credit_early_end=False)(_episode(capped), "agent")


def _answer(stage="mid", n=2, weights=None, bad=None):
    crit = {d: [{"criterion": f"{d} {i}", "pass": i % 2 == 0} for i in range(n)] for d in DIMENSIONS}
    obj = {"stage": stage, "weights": weights or {d: 1 for d in DIMENSIONS}, "criteria": crit}
    if bad:
        bad(obj)
    return "```json\n" + json.dumps(obj) + "\n```"


def test_parse_judgement_accepts_the_format_and_names_what_is_wrong():
    j = parse_judgement(_answer(n=2))
    assert j.stage == "mid" and all(len(j.criteria[d]) == 2 for d in DIMENSIONS)
    assert j.scores() == {d: 0.5 for d in DIMENSIONS}
    for text, why in [("no json here", "no JSON"), ("{not json}", "invalid JSON"), ("[1, 2]", "no JSON"),
                      (_answer(stage="middle"), "unknown stage"), (_answer(n=1), "2-4 criteria"),
                      (_answer(n=5), "2-4 criteria"),
                      (_answer(bad=lambda o: o.pop("criteria")), "no criteria"),
                      (_answer(bad=lambda o: o["criteria"]["turn_quality"][0].update({"pass": "yes"})), "boolean")]:
        got = parse_judgement(text)
        assert isinstance(got, str) and why in got, (text, got)


class ScriptedJudgeLM:
    """Answers each judge prompt with the next of `answers` (a test double of the LM behind LLMJudge)."""

    def __init__(self, answers):
        self.answers, self.prompts = list(answers), []

    def generate(self, batch):
        self.prompts += batch
        return [self.answers.pop(0) for _ in batch]


def test_llm_judge_uses_good_answers_and_counts_and_replaces_bad_ones():
    state = play_texts(TASK, SC, ["hi! how are you?", "fine.", "could you lend me your car?", "no [REFUSE]",
                                  "please?"])
    lm = ScriptedJudgeLM([_answer("early", 3), "sorry, I cannot judge that", _answer("mid", weights={"x": 1})])
    judge = LLMJudge(lm, fallback=RuleJudge())
    js = judge.judge(TASK, state, "agent")
    assert [j.failed for j in js] == [False, True, False] and judge.calls == 3 and judge.failures == 1
    assert judge.failure_rate == pytest.approx(1 / 3) and judge.problems == {"no JSON object": 1}
    assert js[1].criteria == RuleJudge().judge(TASK, state)[1].criteria     # the fallback's verdicts
    second = lm.prompts[1][0]["content"]
    assert "could you lend me your car?" in second and "hi! how are you?" in second
    # the unknown dimension of the third proposal is dropped and the stage prior used
    w, fallback = sanitize_weights(js[2].proposed, js[2].stage)
    assert fallback and w == pytest.approx(MANUAL_SCHEDULE["mid"])


def test_process_reward_counts_the_llm_judges_failures_and_fallbacks_per_step_and_per_run():
    """An unparseable answer (judged by the rule judge) and unusable weights (the stage prior) are counted: per
    step (step_metrics, then anew) and over the run (summary); judge_counts sums runs for summary.json."""
    from dialogrl.rewards import judge_counts

    state = play_texts(TASK, SC, ["hi! how are you?", "fine.", "could you lend me your car?", "no [REFUSE]",
                                  "please?"])
    answers = [_answer("early", 3), "sorry, I cannot judge that", _answer("mid", weights={"x": 1})]
    pr = ProcessReward(LLMJudge(ScriptedJudgeLM(answers * 2), fallback=RuleJudge()), TASK)
    pr(_episode(state), "agent")
    records = pr.drain()
    step = pr.step_metrics()
    assert step["judge/turns"] == 3 and step["judge/failures"] == 1
    assert step["judge/failure_rate"] == pytest.approx(1 / 3)
    assert step["judge/weight_fallbacks"] == sum(r["fallback"] for r in records) >= 1   # the third proposal at least
    assert step["judge/weight_fallback_rate"] == pytest.approx(step["judge/weight_fallbacks"] / 3)
    empty = pr.step_metrics()                                                          # counting starts anew
    assert empty["judge/turns"] == 0 and math.isnan(empty["judge/failure_rate"])
    pr(_episode(state), "agent")
    run = pr.summary()
    assert (run["turns"], run["failures"], run["problems"]) == (6, 2, {"no JSON object": 2})
    assert run["failure_rate"] == pytest.approx(1 / 3)
    both = judge_counts([run, run])
    assert (both["turns"], both["failures"], both["problems"]) == (12, 4, {"no JSON object": 4})
    assert both["failure_rate"] == pytest.approx(1 / 3) and judge_counts()["failure_rate"] is None
    json.dumps(both, allow_nan=False)                                                  # summary.json-ready


def test_process_reward_judges_a_steps_games_in_one_batch():
    """prepare(episodes) (what the Trainer calls before it reads a step's rewards) writes every judge answer of the
    step in one generate call; the rewards are those judged game by game, failures and fallbacks included."""
    texts = [["hi! how are you?", "fine.", "could you lend me your car?", "no [REFUSE]", "please?"],
             ["hello there", "hi", "may I borrow your car tomorrow?", "maybe [ACCEPT]"]]
    episodes = [_episode(play_texts(TASK, SC, t)) for t in texts]
    answers = [_answer("early", 3), "sorry, I cannot judge that", _answer("mid", weights={"x": 1}),
               _answer("early", 2), _answer("late", 4)]
    one_by_one = ProcessReward(LLMJudge(ScriptedJudgeLM(answers), fallback=RuleJudge()), TASK)
    expected = [one_by_one(e, "agent") for e in episodes]
    lm = ScriptedJudgeLM(answers)
    batched = ProcessReward(LLMJudge(lm, fallback=RuleJudge()), TASK)
    calls = []
    lm.generate = lambda batch, inner=lm.generate: calls.append(len(batch)) or inner(batch)
    batched.prepare(episodes)
    assert calls == [5] and [batched(e, "agent") for e in episodes] == expected
    assert batched.summary() == one_by_one.summary() and not batched.judged   # every prepared game read once


def test_llm_judge_with_a_real_tiny_model_counts_every_unusable_answer(toy_model_dir):
    """A tiny model that never learned the format answers junk: every turn falls back and is counted, none raises."""
    from dialogrl.agents import LMAgent
    from dialogrl.models import load_model

    model, tok = load_model(str(toy_model_dir))
    judge = LLMJudge(LMAgent(model, tok, max_new_tokens=24), fallback=RuleJudge())
    eps = play(TASK, {"agent": population("agent", seed=1), "partner": ScriptedAgent(None, seed=2)},
               TASK.sample_scenarios(3, seed=0))
    pr = ProcessReward(judge, TASK)
    rewards = [pr(e, "agent") for e in eps]
    assert judge.calls == sum(len(r) for r in rewards) and judge.failures == judge.calls
    assert all(rec["failed"] for rec in pr.records) and all(x >= 0 for r in rewards for x in r)
    assert pr.summary()["failures"] == pr.summary()["turns"] == judge.calls                   # counted, each one


def test_scored_episode_estimates_are_calibrated_expected_ratings():
    """The rating is the expected digit after each digit's log-probability has its content-free value taken off: a
    prior that favours the middle digit whatever the dialogue cancels, the dialogue's own evidence stays."""
    from dialogrl.rewards import scored_episode_estimates

    class Scorer:   # the middle digit is favoured everywhere; after a real dialogue "9" gains 2 nats
        def answer_logprobs(self, chats, questions):
            free = ["goal: N/A" in c[0]["content"] for c in chats]
            return [{d: -abs(int(d) - 5) + (0 if f else 2.0 * (d == "9")) for d in q.answers}
                    for f, q in zip(free, questions)]

    est = scored_episode_estimates(Scorer(), [([("A", "hi"), ("B", "hello")], "A", ("make a friend", "rest"))])[0]
    e2 = math.exp(2)
    assert est["goal"] == pytest.approx((9 * e2 + sum(range(9))) / (e2 + 9) * 10 / 9)
    assert est["relationship"] == pytest.approx(((9 * e2 + sum(range(1, 9))) / (e2 + 8) - 5) * 5 / 4)
    assert est["failed"] is False
    assert scored_episode_estimates(Scorer(), []) == []


def test_mean_weights_average_each_stage_over_the_runs_that_reached_it():
    from dialogrl.rewards import mean_weights

    one = {d: 1.0 for d in DIMENSIONS}
    three = {d: 3.0 for d in DIMENSIONS}
    out = mean_weights([{"early": one, "mid": one}, {"early": three}])
    assert out == {"early": {d: 2.0 for d in DIMENSIONS}, "mid": one}   # no run reached late


def test_process_log_logs_each_steps_judged_turns_and_keeps_them(tmp_path):
    from types import SimpleNamespace

    from dialogrl.rl.methods.socialrl import ProcessLog
    from dialogrl.run import MetricsLogger, read_metrics

    state = play_texts(TASK, SC, ["hi! how are you doing?", "fine.", "could you lend me your car?", "ok [AGREE]",
                                  "thank you so much!"])
    pr = ProcessReward(RuleJudge(), TASK, schedule="uniform", coef=0.3, credit_early_end=False)
    hook = ProcessLog(pr, MetricsLogger(tmp_path).tagged(method="socialrl"))
    hook(SimpleNamespace(step_count=0))   # nothing judged yet: nothing logged
    r = pr(_episode(state), "agent")
    expected = list(pr.records)
    hook(SimpleNamespace(step_count=1))   # the start of step 1: step 0's judged turns
    assert hook.records == expected and pr.records == []
    rows = read_metrics(tmp_path)
    assert len(rows) == 1 and rows[0]["step"] == 0 and rows[0]["method"] == "socialrl"
    assert rows[0]["process/process"] == pytest.approx(sum(r) / len(r) / 0.3)   # the pass rate, before the coef
    assert {f"process/score/{d}" for d in DIMENSIONS} <= set(rows[0])
    ProcessLog(None, MetricsLogger(tmp_path))(SimpleNamespace(step_count=2))   # no process reward: no row
    assert len(read_metrics(tmp_path)) == 1


def test_validation_summary_ranks_the_judge_and_each_scoring_model_against_gpt4():
    import pandas as pd

    from dialogrl.rewards import validation_summary

    frame = pd.DataFrame({"gpt4_goal": [1, 2, 3, 4], "gpt4_relationship": [0, 1, 2, 3],
                          "judge_goal": [1, 2, 3, 4], "judge_relationship": [3, 2, 1, 0],
                          "smol_goal": [4, 3, 2, 1], "smol_relationship": [0, 1, 3, 2]})
    out = validation_summary(frame, RuleJudge(), ["smol"])
    assert out["goal_spearman"] == pytest.approx(1.0) and out["relationship_spearman"] == pytest.approx(-1.0)
    assert out["sides"] == 4 and "llm_failure_rate" not in out
    assert out["scored"]["smol"]["goal_spearman"] == pytest.approx(-1.0) and out["scored"]["smol"]["failures"] == 0
