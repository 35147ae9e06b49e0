"""Process rewards (SocialRL): six dimensions scored per turn against criteria a judge writes, weighted by stage.

    judge = RuleJudge()                                    # envs/social/judge.py (cpu), or LLMJudge(lm) (gpu)
    process = ProcessReward(judge, task, schedule="dynamic", coef=0.3)
    Trainer(task, model, tok, roles, config, turn_rewards=process)

For one turn of the role, a judge returns a Judgement: the stage (early / mid / late, read from the context), for
each dimension 2-4 binary criteria written for this turn and their verdicts (the dimension's score r_i is their pass
rate), and the weights it proposes. The turn's process reward is coef * sum_i w_i r_i with the weights w of the
schedule:
    dynamic   the judge's proposal, through `sanitize_weights`
    manual    MANUAL_SCHEDULE[stage], the paper's fixed schedule
    uniform   1/6 each
The outcome reward (the task's score) arrives at the role's last turn in the trainer, as R_t = 0.3 R_process,t +
1.0 R_outcome (the paper's form).

Early ends. A game that ends before its horizon (an agreement; `task.max_exchanges` turns of the role in a full game)
would pay less process reward than one talked out to the end, so a per-turn reward would teach the policy to drag a
conversation on. With `credit_early_end` (the default) the last turn of such a game is also credited, once for each
turn the early end saved, with its own process reward: the ended game is an absorbing state that keeps the reward
rate of its close.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dialogrl.game import Question
from dialogrl.stats import rank_agreement

DIMENSIONS = ("goal_advancement", "strategic_positioning", "relational_attunement", "persona_consistency",
              "contextual_coherence", "turn_quality")
STAGES = ("early", "mid", "late")
SCHEDULES = ("dynamic", "manual", "uniform")
# The paper's hand-set schedule, in DIMENSIONS order (also the prior a degenerate proposal falls back to).
MANUAL_SCHEDULE: dict[str, tuple[float, ...]] = {
    "early": (0.10, 0.10, 0.30, 0.15, 0.20, 0.15),
    "mid": (0.20, 0.20, 0.20, 0.15, 0.15, 0.10),
    "late": (0.30, 0.25, 0.10, 0.15, 0.10, 0.10),
}
UNIFORM = tuple([1 / len(DIMENSIONS)] * len(DIMENSIONS))
WEIGHT_CAP = 0.5   # no dimension may carry more than half of a turn's process reward


@dataclass
class Criterion:
    dimension: str
    text: str
    passed: bool


@dataclass
class Judgement:
    """One turn, judged: its stage, criteria by dimension, and the weights the judge proposes (raw, unchecked).
    `failed` says the judge's own output could not be used (an LLM judge's parse failure; the turn was then judged
    by its fallback), `problem` why."""
    stage: str
    criteria: dict[str, list[Criterion]]
    proposed: object = None
    failed: bool = False
    problem: str | None = None

    def scores(self) -> dict[str, float]:
        """Each dimension's pass rate (0.0 for a dimension without criteria)."""
        return {d: (sum(c.passed for c in self.criteria.get(d, [])) / len(self.criteria[d]))
                if self.criteria.get(d) else 0.0 for d in DIMENSIONS}


def sanitize_weights(raw, stage: str, cap: float = WEIGHT_CAP) -> tuple[tuple[float, ...], bool]:
    """Proposed weights -> (weights in DIMENSIONS order summing to 1, whether the stage prior was used instead).

    The steps: keep known dimensions only (whitelist), numbers only, clip to >= 0; a proposal that is not a mapping,
    or is all zero after that, falls back to MANUAL_SCHEDULE[stage]; L1-normalise; cap each weight at `cap` and
    give the excess to the uncapped dimensions in proportion to their weights (redistribution), until none exceeds.
    """
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}: choose one of {', '.join(STAGES)}")
    if not 1 / len(DIMENSIONS) <= cap <= 1:
        raise ValueError(f"cap={cap!r}: must be in [1/{len(DIMENSIONS)}, 1]")
    w = [0.0] * len(DIMENSIONS)
    if isinstance(raw, Mapping):
        for k, v in raw.items():
            if k in DIMENSIONS and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                w[DIMENSIONS.index(k)] = max(0.0, float(v))
    fallback = sum(w) <= 0
    if fallback:
        w = list(MANUAL_SCHEDULE[stage])
    total = sum(w)
    w = [x / total for x in w]
    for _ in range(len(w)):
        over = [i for i, x in enumerate(w) if x > cap + 1e-12]
        if not over:
            break
        excess = sum(w[i] - cap for i in over)
        for i in over:
            w[i] = cap
        free = [i for i, x in enumerate(w) if x < cap - 1e-12]
        mass = sum(w[i] for i in free)
        for i in free:   # in proportion to their weights (equally when they are all zero)
            w[i] += excess * (w[i] / mass if mass > 0 else 1 / len(free))
    total = sum(w)
    return tuple(x / total for x in w), fallback


def schedule_weights(schedule: str, judgement: Judgement) -> tuple[tuple[float, ...], bool]:
    """The weights of `schedule` for one judged turn, and whether a dynamic proposal fell back to the prior."""
    if schedule == "dynamic":
        return sanitize_weights(judgement.proposed, judgement.stage)
    if schedule == "manual":
        return MANUAL_SCHEDULE[judgement.stage], False
    if schedule == "uniform":
        return UNIFORM, False
    raise ValueError(f"schedule={schedule!r}: choose one of {', '.join(SCHEDULES)}")


class Judge:
    """A process-reward judge. `judge(task, state, role)` judges every talk turn of `role` in a finished game, in
    order (a turn is judged on the context before it and its own text; never on later turns)."""
    name = "judge"

    def judge(self, task, state, role: str) -> list[Judgement]:
        raise NotImplementedError

    def judge_many(self, task, states: Sequence, role: str) -> list[list[Judgement]]:
        """`judge` for each of several finished games (a judge with a model overrides it: one batch for all)."""
        return [self.judge(task, state, role) for state in states]


def _no_counts() -> dict:
    return {"turns": 0, "failures": 0, "weight_fallbacks": 0, "problems": {}}


def judge_counts(counts: Sequence[Mapping] = ()) -> dict:
    """The sum of judge counts (`ProcessReward.summary()` of several runs, or nothing: zeros) with their rates:
        turns                 turns judged
        failures              turns whose judge answer could not be used (an LLM judge's parse failure): the
                              fallback judge (a RuleJudge) judged them
        weight_fallbacks      turns whose proposed weights could not be used (schedule "dynamic" only): the stage
                              prior MANUAL_SCHEDULE weighted them
        failure_rate, weight_fallback_rate   the counts over turns (None without turns)
        problems              failures by reason (see parse_judgement)
    """
    out = _no_counts()
    for c in counts:
        for k in ("turns", "failures", "weight_fallbacks"):
            out[k] += int(c.get(k, 0))
        for why, n in c.get("problems", {}).items():
            out["problems"][why] = out["problems"].get(why, 0) + n
    for k, rate in (("failures", "failure_rate"), ("weight_fallbacks", "weight_fallback_rate")):
        out[rate] = out[k] / out["turns"] if out["turns"] else None
    return out


@dataclass
class ProcessReward:
    """The trainer's `turn_rewards`: coef * sum_i w_i r_i for each talk turn of `role` in a game of `task`, from
    `judge` and `schedule`.
    Every judged turn is also recorded in `records` (stage, scores, weights, fallback), for the reward-component and
    weight figures; `drain()` returns them and starts a new list. The judge's failures and weight fallbacks are
    counted (`judge_counts`): `step_metrics()` gives those since its last call as `judge/...` columns (the Trainer
    logs them every step), `summary()` those of the whole run (for summary.json; `judge_counts` sums runs)."""
    judge: Judge
    task: object
    schedule: str = "dynamic"
    coef: float = 0.3
    role: str = "agent"
    credit_early_end: bool = True
    records: list[dict] = field(default_factory=list)
    totals: dict = field(default_factory=_no_counts)          # the judge's counts over the run (summary())
    step_counts: dict = field(default_factory=_no_counts)     # the same since the last step_metrics()
    judged: dict = field(default_factory=dict, repr=False)    # id(game state) -> its judgements, from prepare()

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}: choose one of {', '.join(SCHEDULES)}")
        if self.coef < 0:
            raise ValueError(f"coef={self.coef!r}: must be >= 0")

    def prepare(self, episodes) -> None:
        """Judge the role's turns in all these games at once (`Judge.judge_many`: an LLM judge writes every answer of
        a training step in one batch); the calls for these games then read the judgements from here."""
        states = [e.state for e in episodes]
        self.judged = dict(zip(map(id, states), self.judge.judge_many(self.task, states, self.role)))

    def __call__(self, episode, role: str) -> list[float]:
        n = sum(t.role == role and t.phase == "talk" for t in episode.state.turns)
        if role != self.role:
            return [0.0] * n
        out = []
        judged = self.judged.pop(id(episode.state), None)
        for j in judged if judged is not None else self.judge.judge(self.task, episode.state, role):
            weights, fallback = schedule_weights(self.schedule, j)
            for c in (self.totals, self.step_counts):
                c["turns"] += 1
                c["failures"] += j.failed
                c["weight_fallbacks"] += fallback
                if j.failed:
                    why = j.problem or "unknown"
                    c["problems"][why] = c["problems"].get(why, 0) + 1
            scores = j.scores()
            r = sum(w * scores[d] for w, d in zip(weights, DIMENSIONS))
            self.records.append({"stage": j.stage, "process": r, "fallback": fallback, "failed": j.failed,
                                 "scenario": getattr(episode.state.scenario, "id", None), "game": episode.state.seed,
                                 **{f"score/{d}": scores[d] for d in DIMENSIONS},
                                 **{f"weight/{d}": w for d, w in zip(DIMENSIONS, weights)}})
            out.append(self.coef * r)
        horizon = getattr(self.task, "max_exchanges", None)
        if self.credit_early_end and horizon and out and len(out) < horizon:
            out[-1] *= 1 + horizon - len(out)
        return out

    def drain(self) -> list[dict]:
        records, self.records = self.records, []
        return records

    def step_metrics(self) -> dict[str, float]:
        """The judge's counts since the last call (a training step's), as judge/turns, judge/failures,
        judge/failure_rate, judge/weight_fallbacks, judge/weight_fallback_rate (rates NaN when no turn was
        judged: every row has every column); then counting starts anew."""
        c, self.step_counts = judge_counts([self.step_counts]), _no_counts()
        return {f"judge/{k}": float("nan" if v is None else v) for k, v in c.items() if k != "problems"}

    def summary(self) -> dict:
        """The judge's counts and rates over every turn this ProcessReward judged (see judge_counts)."""
        return judge_counts([self.totals])


# ------------------------------------------------------------------------------------------------- LLM judge

JUDGE_PROMPT = """You are a reward model for social dialogue. The {role} in the scene below has just spoken.
Scene: {scene}
Dialogue so far:
{history}
The {role}'s turn to judge: "{turn}"

1. Say the conversation's stage: early (building the relationship), mid (pursuing the goal) or late (closing).
2. For each of these six dimensions write 2 to 4 yes/no criteria that a good turn here would meet, and say whether
this turn meets each: {dimensions}.
3. Propose a weight for each dimension for this stage (non-negative, summing to 1).
Answer with JSON only: {{"stage": "...", "weights": {{"<dimension>": 0.2, ...}},
"criteria": {{"<dimension>": [{{"criterion": "...", "pass": true}}, ...], ...}}}}"""


def parse_judgement(text: str) -> Judgement | str:
    """An LLM judge's answer -> a Judgement, or the reason it cannot be used (a string). Never raises.
    The answer must be one JSON object (code fences allowed) with a known stage and, for every dimension, 2-4
    criteria with boolean verdicts; the weights are left for the sanitiser."""
    m = re.search(r"\{.*\}", text, re.S)
    if m is None:
        return "no JSON object"
    try:
        obj = json.loads(m.group(0))
    except (json.JSONDecodeError, RecursionError):
        return "invalid JSON"
    if not isinstance(obj, dict):
        return "not a JSON object"
    stage = obj.get("stage")
    if stage not in STAGES:
        return f"unknown stage {str(stage)[:20]!r}"
    crit = obj.get("criteria")
    if not isinstance(crit, dict):
        return "no criteria"
    out = {}
    for d in DIMENSIONS:
        items = crit.get(d)
        if not isinstance(items, list) or not 2 <= len(items) <= 4:
            return f"{d}: expected 2-4 criteria"
        cs = []
        for it in items:
            if not isinstance(it, dict) or not isinstance(it.get("pass"), bool):
                return f"{d}: a criterion without a boolean 'pass'"
            cs.append(Criterion(d, str(it.get("criterion", ""))[:200], it["pass"]))
        out[d] = cs
    return Judgement(stage, out, obj.get("weights"))


class LLMJudge(Judge):
    """A judge played by a language model (the `gpu` profile: a hub instruct model): it writes each turn's criteria
    and verdicts and proposes weights in one JSON answer (JUDGE_PROMPT). A turn whose answer cannot be parsed is
    judged by `fallback` (a RuleJudge) and counted: `failures` / `calls`, and `problems` by reason.

    lm: anything with `generate(messages_batch) -> list of utterances` (an agents.LMAgent); `describe(task, state)`
    gives the scene line of the prompt."""
    name = "llm"

    def __init__(self, lm, fallback: Judge, describe: Callable | None = None):
        self.lm, self.fallback, self.describe = lm, fallback, describe
        self.calls = self.failures = 0
        self.problems: dict[str, int] = {}

    @property
    def failure_rate(self) -> float:
        return self.failures / self.calls if self.calls else float("nan")

    def prompts(self, task, state, role: str) -> list[list[dict]]:
        talk = state.talk_turns()
        scene = self.describe(task, state) if self.describe else task.system_prompt(state.scenario, role)
        out = []
        for k, t in enumerate(talk):
            if t.role != role:
                continue
            history = "\n".join(f"{x.role}: {x.text}" for x in talk[:k]) or "(nothing yet)"
            prompt = JUDGE_PROMPT.format(role=role, scene=scene, history=history, turn=t.text,
                                         dimensions=", ".join(DIMENSIONS))
            out.append([{"role": "user", "content": prompt}])
        return out

    def judge(self, task, state, role: str) -> list[Judgement]:
        return self.judge_many(task, [state], role)[0]

    def judge_many(self, task, states: Sequence, role: str) -> list[list[Judgement]]:
        """Every game's turns of `role`, all answers written in one batch of the judge model."""
        prompts = [self.prompts(task, state, role) for state in states]
        flat = [p for ps in prompts for p in ps]
        answers = iter(self.lm.generate(flat) if flat else [])
        out = []
        for state, ps in zip(states, prompts):
            fallback, judged = None, []
            for k, a in zip(range(len(ps)), answers):
                self.calls += 1
                j = parse_judgement(getattr(a, "text", a))
                if isinstance(j, str):
                    self.failures += 1
                    self.problems[j] = self.problems.get(j, 0) + 1
                    fallback = fallback or self.fallback.judge(task, state, role)
                    why, j = j, fallback[k]
                    j.failed, j.problem = True, why
                judged.append(j)
            out.append(judged)
        return out


EPISODE_PROMPT = """You are an evaluator of social dialogue. {me} had this goal: {goal}
The dialogue:
{dialogue}

Rate {me}'s goal completion from 0 (not at all) to 10 (fully), and how the relationship between the two changed from
-5 (much worse) to 5 (much better). Answer with JSON only: {{"goal": <number>, "relationship": <number>}}"""


def parse_episode_scores(text: str) -> dict[str, float] | str:
    """An LLM judge's episode scores -> {"goal": 0..10, "relationship": -5..5}, or the reason it cannot be used."""
    m = re.search(r"\{.*?\}", text, re.S)
    if m is None:
        return "no JSON object"
    try:
        obj = json.loads(m.group(0))
    except json.JSONDecodeError:
        return "invalid JSON"
    try:
        goal, rel = float(obj["goal"]), float(obj["relationship"])
    except (KeyError, TypeError, ValueError):
        return "no numeric goal and relationship"
    if not (0 <= goal <= 10 and -5 <= rel <= 5):
        return "scores out of range"
    return {"goal": goal, "relationship": rel}


def llm_episode_estimates(judge: LLMJudge,
                          dialogues: Sequence[tuple[list[tuple[str, str]], str, tuple[str, str]]]) -> list[dict]:
    """Episode-level estimates of an LLM judge for (turns, speaker, (its goal, the other's goal)) dialogues (one
    batch), each {"goal", "relationship", "failed"}; an unusable answer is counted on the judge and replaced by its
    fallback's `episode_estimates(turns, speaker, goals)` (a RuleJudge's)."""
    prompts = [[{"role": "user", "content": EPISODE_PROMPT.format(
        me=me, goal=goals[0], dialogue="\n".join(f"{s}: {t}" for s, t in turns))}] for turns, me, goals in dialogues]
    out = []
    for (turns, me, goals), a in zip(dialogues, judge.lm.generate(prompts) if prompts else []):
        judge.calls += 1
        got = parse_episode_scores(getattr(a, "text", a))
        if isinstance(got, str):
            judge.failures += 1
            judge.problems[got] = judge.problems.get(got, 0) + 1
            got = {**judge.fallback.episode_estimates(turns, me, goals), "failed": True}
        out.append({"failed": False, **got})
    return out


# A small model does not keep a JSON format (SmolLM2-135M), so its episode scores are read off its next-token
# distribution instead: a rating question answered with one digit, each digit's probability calibrated against the same
# question after a content-free dialogue (as agents.counterpart calibrates decisions), the estimate the expected
# rating. Scales: goal 0..9 -> 0..10; relationship 1..9 (5 unchanged) -> -5..5.
SCORE_PROMPT = """You are an evaluator of social dialogue. {me} had this goal: {goal}
The dialogue:
{dialogue}"""
SCORE_QUESTIONS = {
    "goal": ("How fully did {me} achieve the goal? Answer with one digit from 0 (not at all) to 9 (fully).",
             tuple("0123456789"), lambda d: d * 10 / 9),
    "relationship": ("How did the relationship between the two change? Answer with one digit from 1 (much worse) to 9 "
                     "(much better); 5 means unchanged.", tuple("123456789"), lambda d: (d - 5) * 5 / 4)}


def scored_episode_estimates(scorer, dialogues: Sequence[tuple[list[tuple[str, str]], str, tuple[str, str]]]
                             ) -> list[dict]:
    """Episode-level estimates of a language model read off its answer likelihoods, for (turns, speaker, (its goal,
    the other's goal)) dialogues: per dialogue {"goal": 0..10, "relationship": -5..5, "failed": False}, each the
    expected rating under softmax(log p(digit | dialogue, question) - log p(digit | content-free dialogue, question)).
    Never fails: there is no format to break. scorer: a counterpart.LMCounterpart (its `answer_logprobs`)."""

    def chat(me: str, goal: str, dialogue: str, key: str) -> list[dict]:
        return [{"role": "user", "content": SCORE_PROMPT.format(me=me, goal=goal, dialogue=dialogue) + "\n\n"
                 + SCORE_QUESTIONS[key][0].format(me=me)}]

    out = [{"failed": False} for _ in dialogues]
    texts = ["\n".join(f"{s}: {t}" for s, t in turns) for turns, _, _ in dialogues]
    for key, (_, digits, scale) in SCORE_QUESTIONS.items():
        q = Question(key, digits)
        free = scorer.answer_logprobs([chat("N/A", "N/A", "N/A", key)], [q])[0]
        chats = [chat(me, goals[0], text, key) for (_, me, goals), text in zip(dialogues, texts)]
        for o, lp in zip(out, scorer.answer_logprobs(chats, [q] * len(chats)) if chats else []):
            z = [lp[d] - free[d] for d in digits]
            top = max(z)
            p = [math.exp(x - top) for x in z]
            o[key] = scale(sum(int(d) * w for d, w in zip(digits, p)) / sum(p))
    return out


def validation_summary(frame, judge, scored: Sequence[str] = ()) -> dict:
    """How the judge's (and each scoring model's) estimates of the validation episodes rank as GPT-4's do: `frame`
    has a row per scored dialogue side and the columns "gpt4_<key>", "judge_<key>" and "<model>_<key>" for each of
    `scored` (envs.social.data.validation_rows). Returns the judge's Spearman's rho per key with its interval
    (`stats.rank_agreement`), "sides", an LLM judge's "llm_failure_rate", and "scored": {model: its rho per key,
    "failures": 0} (scoring by likelihood cannot fail)."""
    out = {**rank_agreement(frame, "judge"), "sides": len(frame)}
    if isinstance(judge, LLMJudge):
        out["llm_failure_rate"] = judge.failure_rate
    out["scored"] = {name: {**rank_agreement(frame, name), "failures": 0} for name in scored}
    return out


def varied_within_groups(records: Sequence[dict], tol: float = 1e-9) -> float:
    """The share of scenario groups (a training step's dialogues of one scenario: the group of the group baselines)
    in which the process reward told the dialogues apart: the per-dialogue sums of `records` (ProcessReward's, keyed
    by scenario id and game seed) differ by more than `tol`. A process reward that gives every dialogue of a group
    the same total adds nothing to an advantage: the intervention did not happen. nan without a group of two."""
    totals: dict = {}
    for r in records:
        key = (r.get("scenario"), r.get("game"))
        totals[key] = totals.get(key, 0.0) + r["process"]
    groups: dict = {}
    for (scenario, _), total in totals.items():
        groups.setdefault(scenario, []).append(total)
    spread = [max(g) - min(g) > tol for g in groups.values() if len(g) > 1]
    return sum(spread) / len(spread) if spread else float("nan")


def weights_table(records: Sequence[dict]) -> dict[str, dict[str, float]]:
    """Mean weight of each dimension per stage over ProcessReward records (the per-stage weights figure)."""
    out = {}
    for s in STAGES:
        rows = [r for r in records if r["stage"] == s]
        if rows:
            out[s] = {d: sum(r[f"weight/{d}"] for r in rows) / len(rows) for d in DIMENSIONS}
    return out


def mean_weights(tables: Sequence[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """The mean of several runs' `weights_table`s, stage by stage over the runs that reached the stage."""
    return {s: {d: float(np.mean([t[s][d] for t in tables if s in t])) for d in DIMENSIONS}
            for s in STAGES if any(s in t for t in tables)}
