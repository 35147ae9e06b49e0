"""Static Context RL: the offline baseline of "From Static Context to Calibrated Interactive RL" (paper 1).

The policy never plays a game while it trains. Its contexts are prefixes of logged dialogues: for every talk turn k
of a logged game, the game's first k turns replayed through the task's rules, and the role that spoke turn k in
the log. The policy writes that role's turn k, and a turn-level reward model fitted on the same logs scores it:

    s' = task.step(copy(s_k), candidate)                   the candidate applied by the task's own rules
    r  = outcome(s')[role]                                 if s' ended the game (the rules score it exactly)
       = f_theta(task.turn_features(s', role))             otherwise, minus the task's penalty if the turn broke a rule
    f_theta: a regression of the speaker's logged final outcome reward on the features of the state after the
             logged turn (scikit-learn; ridge or gradient boosting, chosen by held-out R^2 on a split by game)

Every context is written `group_size` times; advantages are group baselines over those candidates (GRPO/RLOO), and
the update is the interactive trainer's own `Trainer.update` (clipped surrogate, k3 KL to the base model, one
adapter and optimizer per role), so the two methods differ only in where the contexts and rewards come from.

This is the offline baseline of the paper: its contexts never come from the policy's own play. It trains on
histories drawn from the logs (d_data), and is deployed on histories its own turns produce (d_pi): the
policy-induced context shift the paper measures (eps_i of Theorem 3.1, which compounds over the H turns). The reward
model is only as good as the logs, too: turns the logs never hold (rule breaks, in scripted logs) are priced by the
rules (the penalty), not learned.

    games = persona_logs(task, 2000, seed=500_000)             # synthetic "human" logs (or data.replay of real ones)
    contexts = cut_contexts(task, games)
    rm = TurnRewardModel(task).fit(contexts); print(rm.fit_report)
    trainer = StaticContextTrainer(task, model, tok, {"A": RoleSpec(adapter="A", trainable=True, lr=1e-3)},
                                   TrainConfig(steps=30, kl_coef=0.1), contexts=contexts, reward_model=rm)
    rows = trainer.train()
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from dialogrl.agents import LMAgent
from dialogrl.envs import game_of
from dialogrl.game import ActRequest, GameState, Task, Turn
from dialogrl.rl.advantages import group_advantages
from dialogrl.rl.batching import Sample
from dialogrl.rl.trainer import RoleSpec, Trainer
from dialogrl.rollout import play
from dialogrl.seeds import stream_seed

REGRESSORS = ("ridge", "hgb")


def one_thread():
    """scikit-learn on one thread: the fits are small, and OpenMP threads spinning on shared cores were ~40x slower."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


# ------------------------------------------------------------------------------------------------- the contexts

@dataclass
class Context:
    """A logged history prefix and the role that spoke next in the log."""
    state: GameState   # the logged game's first k talk turns, replayed through the task's rules (not finished)
    role: str          # the role that spoke turn k in the log: the one the policy writes for
    k: int             # talk turns in the prefix
    text: str          # what that role said at turn k in the log
    reward: float      # that role's final outcome reward in the logged game (the reward model's target)
    game: int          # index of the logged game (splits and groups by game)


def persona_logs(task: Task, n: int, seed: int, personas: Sequence[str] | None = None) -> list[GameState]:
    """n games of scripted persona self-play on scenarios drawn with `seed`: the synthetic "human" logs.

    Each role of each game is played by a persona drawn from `personas` (the role's defaults if None): the
    game's `population(role, personas, seed=...)` (dialogrl.envs.game_of), as in the warm-start corpora.
    """
    population = game_of(task).population
    agents = {role: population(role, personas, seed=seed * len(task.roles) + i + 1)
              for i, role in enumerate(task.roles)}
    return [e.state for e in play(task, agents, task.sample_scenarios(n, seed=seed))]


def cut_contexts(task: Task, games: Sequence[GameState], roles: Sequence[str] | None = None,
                 n: int | None = None) -> list[Context]:
    """Every talk turn of every finished logged game as a Context (only those spoken by `roles`, default all; with
    `n`, at most n of them, evenly spread over the logs).

    The prefix of turn k is rebuilt by replaying the logged texts of turns 0..k-1 through task.step on a fresh
    state, so the task's bookkeeping (standing offer, phase) is that of the prefix, not of the finished game.
    Returns contexts in log order: game by game, turn by turn.
    """
    roles = set(task.roles if roles is None else roles)
    out = []
    for g, game in enumerate(games):
        if not game.done:
            raise ValueError(f"logged game {g} is not finished: its outcome is the reward model's target")
        outcome = task.outcome(game)
        state = task.reset(game.scenario)
        for k, logged in enumerate(game.talk_turns()):
            if state.done or state.info.get("phase", "talk") != "talk":
                raise ValueError(f"logged game {g}: the task's rules end the talk before logged turn {k}")
            if task.current_role(state) != logged.role:
                raise ValueError(f"logged game {g}: turn {k} is {logged.role}'s, the rules give it to "
                                 f"{task.current_role(state)}")
            if logged.role in roles:
                out.append(Context(copy.deepcopy(state), logged.role, k, logged.text,
                                   float(outcome[logged.role]["reward"]), g))
            task.step(state, logged.text).agent = logged.agent
    if n is not None and n < len(out):
        out = [out[i] for i in np.linspace(0, len(out) - 1, n).astype(int)]
    return out


# ---------------------------------------------------------------------------------------------- the reward model

def make_regressor(kind: str, seed: int = 0):
    """A fresh scikit-learn regressor: 'ridge' (standardised features) or 'hgb' (histogram gradient boosting)."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if kind == "ridge":
        return make_pipeline(StandardScaler(), Ridge(alpha=1.0))
    if kind == "hgb":
        return HistGradientBoostingRegressor(max_iter=200, learning_rate=0.1, random_state=seed)
    raise ValueError(f"regressor {kind!r}: choose one of {', '.join(REGRESSORS)}")


class TurnRewardModel:
    """A turn-level reward model fitted on logged games: scores a candidate turn for a history prefix.

    task: the task of the logs; it must implement `turn_features(state, role)`.
    kind: "auto" (the regressor with the best held-out R^2 of `REGRESSORS`), "ridge" or "hgb".
    exact_terminal: a candidate that ends the game is scored by the task's own outcome, not the regression.
    invalid_penalty: subtracted when a candidate breaks a rule and the game goes on (None: the task's
        `invalid_penalty`, 0 if it has none). The logs hold few or no rule breaks, so the regression cannot price them.
    test_frac, seed: the held-out share of the logged games for `fit_report`, and the split's seed.
    """

    def __init__(self, task: Task, kind: str = "auto", exact_terminal: bool = True,
                 invalid_penalty: float | None = None, test_frac: float = 0.2, seed: int = 0):
        if kind != "auto" and kind not in REGRESSORS:
            raise ValueError(f"kind={kind!r}: choose 'auto' or one of {', '.join(REGRESSORS)}")
        if not 0 < test_frac < 1:
            raise ValueError(f"test_frac={test_frac!r}: must be in (0, 1)")
        self.task, self.kind, self.exact_terminal = task, kind, exact_terminal
        self.invalid_penalty = float(getattr(task, "invalid_penalty", 0.0) if invalid_penalty is None
                                     else invalid_penalty)
        self.test_frac, self.seed = test_frac, seed
        self.vectorizer = None   # sklearn DictVectorizer: feature dicts -> (N, F) matrices
        self.regressor = None    # f_theta, refitted on all logged pairs
        self.fit_report: dict = {}

    def apply(self, state: GameState, text: str) -> tuple[GameState, Turn]:
        """`text` applied by the task's rules to a copy of `state` (the state itself is left as it was)."""
        after = copy.deepcopy(state)
        return after, self.task.step(after, text)

    def rules(self, afters: Sequence[GameState], turns: Sequence[Turn], roles: Sequence[str]
              ) -> tuple[np.ndarray, np.ndarray]:
        """What the rules already decide, per candidate: (N,) the exact outcome reward where the game ended (NaN
        where it goes on, or everywhere without exact_terminal), and (N,) 1 where the turn broke a rule."""
        exact = np.array([self.task.outcome(a)[r]["reward"] if (self.exact_terminal and a.done) else np.nan
                          for a, r in zip(afters, roles)])
        broke = np.array([float(t.invalid is not None) for t in turns])
        return exact, broke

    def combine(self, predicted: np.ndarray, exact: np.ndarray, broke: np.ndarray) -> np.ndarray:
        """The score as used: r = outcome where the game ended, else f_theta - penalty * [rule broken]."""
        return np.where(np.isnan(exact), predicted - self.invalid_penalty * broke, exact)

    def fit(self, contexts: Sequence[Context]) -> TurnRewardModel:
        """Fit f_theta on (state after the logged turn, the speaker's logged final reward) for every context.

        Held out: `test_frac` of the logged games (whole games, so no game is on both sides). Every candidate
        regressor is fitted on the rest and scored on them; the best (by R^2 of the score as used) is refitted on
        all pairs. Sets `fit_report`: held-out r2 and mae of the score as used, r2_learned (the regression alone),
        r2_open (pairs whose turn did not end the game: where the regression decides), r2 of each candidate.
        """
        from sklearn.feature_extraction import DictVectorizer
        from sklearn.metrics import mean_absolute_error, r2_score

        if not contexts:
            raise ValueError("no contexts to fit on")
        applied = [self.apply(c.state, c.text) for c in contexts]
        afters, turns = [a for a, _ in applied], [t for _, t in applied]
        roles = [c.role for c in contexts]
        self.vectorizer = DictVectorizer(sparse=False)
        X = self.vectorizer.fit_transform([self.task.turn_features(a, r) for a, r in zip(afters, roles)])  # (N, F)
        y = np.array([c.reward for c in contexts])                                                        # (N,)
        exact, broke = self.rules(afters, turns, roles)                                                   # (N,)
        games = np.array([c.game for c in contexts])
        ids = np.unique(games)
        rng = np.random.default_rng(self.seed)
        test_games = rng.choice(ids, size=max(1, int(round(self.test_frac * len(ids)))), replace=False)
        te = np.isin(games, test_games)
        if te.all():
            raise ValueError("fit needs at least two logged games (one to hold out)")
        tr = ~te
        goes_on = np.array([not a.done for a in afters])[te]  # held-out pairs where the regression decides
        candidates = {}
        for kind in (REGRESSORS if self.kind == "auto" else (self.kind,)):
            with one_thread():
                learned = make_regressor(kind, self.seed).fit(X[tr], y[tr]).predict(X[te])
            used = self.combine(learned, exact[te], broke[te])
            candidates[kind] = {"r2": float(r2_score(y[te], used)), "mae": float(mean_absolute_error(y[te], used)),
                                "r2_learned": float(r2_score(y[te], learned)),
                                "r2_open": float(r2_score(y[te][goes_on], used[goes_on]))
                                if goes_on.sum() > 1 else float("nan")}
        best = max(candidates, key=lambda k: candidates[k]["r2"])
        with one_thread():
            self.regressor = make_regressor(best, self.seed).fit(X, y)
        self.fit_report = {"model": best, **candidates[best],
                           "candidates_r2": {k: v["r2"] for k, v in candidates.items()},
                           "n_train": int(tr.sum()), "n_test": int(te.sum()), "games_test": len(test_games),
                           "target_mean": float(y.mean()), "target_std": float(y.std())}
        return self

    def score_details(self, states: Sequence[GameState], roles: Sequence[str], texts: Sequence[str]
                      ) -> tuple[np.ndarray, list[GameState], list[Turn]]:
        """(scores (N,), the states after each candidate, each candidate's Turn as the rules parsed it)."""
        if self.regressor is None:
            raise RuntimeError("the reward model is not fitted: call fit(contexts) first")
        applied = [self.apply(s, t) for s, t in zip(states, texts)]
        afters, turns = [a for a, _ in applied], [t for _, t in applied]
        X = self.vectorizer.transform([self.task.turn_features(a, r) for a, r in zip(afters, roles)])  # (N, F)
        with one_thread():
            predicted = self.regressor.predict(X)
        return self.combine(predicted, *self.rules(afters, turns, roles)), afters, turns

    def score(self, states: Sequence[GameState], roles: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """(N,) predicted final outcome reward of roles[i] if it says texts[i] in states[i] (states are not changed)."""
        return self.score_details(states, roles, texts)[0]


def context_rewards(task: Task, policy: LMAgent, contexts: Sequence[Context], reward_model: TurnRewardModel,
                    seed: int = 0) -> np.ndarray:
    """(N,) Static Context RL's own objective for a frozen policy: the reward model's score of the turn the policy
    writes in each logged context (one sample each). Held-out contexts (cut from logs the reward model and the
    trainer never saw) give a method's manipulation check: its mean against the base's on the same contexts.
    Context i is written from its own seed, stream_seed("eval-games", seed, i, role, "logged contexts") (the policy
    is not part of it: methods are compared on common random numbers, whatever ran before)."""
    states = []
    for i, c in enumerate(contexts):  # a copy with a game seed: the logged context itself is left as it is
        states.append(dataclasses.replace(c.state, seed=stream_seed("eval-games", seed, i, c.role, "logged contexts")))
    requests = [ActRequest(task, s, c.role, task.view(s, c.role)) for s, c in zip(states, contexts)]
    said = policy.act(requests)
    policy.clear_cache()  # the contexts' KV caches and token streams (their states never finish)
    texts = [u if isinstance(u, str) else u.text for u in said]   # a scripted agent says a plain string
    return reward_model.score([c.state for c in contexts], [c.role for c in contexts], texts)


# ------------------------------------------------------------------------------------------------- the trainer

@dataclass
class StaticContextTrainer(Trainer):
    """Static Context RL on the interactive trainer's update path: same config, adapters, optimizers and loss.

    contexts: logged Contexts (cut_contexts); those of trainable roles are the training pool.
    reward_model: a fitted TurnRewardModel.
    Roles missing from `roles` are filled with the frozen base model (they never speak: nothing is played).
    Per step, `config.scenarios_per_step` contexts are drawn from the pool (without replacement, seeded by
    (config.seed, step)), each written `config.group_size` times by its role's adapter; under `accelerate launch`
    each process takes its share of the context groups, as Trainer does with scenario groups. Algorithms: grpo or
    rloo (one turn per context: no critic to train). Metrics: reward/<role> is the mean reward-model score of that
    role's candidates.
    """
    contexts: list[Context] = field(default_factory=list)
    reward_model: TurnRewardModel | None = None

    def __post_init__(self):
        if self.config.algorithm not in ("grpo", "rloo"):
            raise ValueError(f"algorithm={self.config.algorithm!r}: Static Context RL uses group baselines, "
                             "choose 'grpo' or 'rloo'")
        if self.reward_model is None or self.reward_model.regressor is None:
            raise ValueError("StaticContextTrainer needs a fitted TurnRewardModel (reward_model=...)")
        trainable = {r for r, s in self.roles.items() if s.trainable}
        if not trainable:
            raise ValueError("no trainable role: give one a RoleSpec(adapter=..., trainable=True)")
        self.pool = [c for c in self.contexts if c.role in trainable]
        if not self.pool:
            raise ValueError(f"no logged contexts of the trainable role(s) {sorted(trainable)}")
        self.roles = {**{r: RoleSpec() for r in self.task.roles}, **self.roles}
        super().__post_init__()
        # each path's policy; no KV cache kept between turns (contexts repeat, and the adapter changes every step)
        self.policies = {a: self.lm_agent(a, reuse_cache=False) for a in self.adapter_roles}

    def batch(self, step: int) -> tuple[list[Context], list[int]]:
        """This process's share of the step's contexts, each repeated group_size times, and their group ids."""
        cfg, acc = self.config, self.accelerator
        rng = np.random.default_rng([cfg.seed, step])
        idx = rng.choice(len(self.pool), size=min(cfg.scenarios_per_step, len(self.pool)), replace=False)
        mine = list(range(len(idx)))[acc.process_index::acc.num_processes]
        contexts = [self.pool[idx[g]] for g in mine for _ in range(cfg.group_size)]
        groups = [g for g in mine for _ in range(cfg.group_size)]
        return contexts, groups

    def step(self) -> dict:
        """One batch of logged contexts, one turn per context and candidate, one update per path; the metrics."""
        k, cfg = self.step_count, self.config
        contexts, groups = self.batch(k)
        self.model.eval()
        said = [None] * len(contexts)
        for adapter, path_roles in self.adapter_roles.items():
            idx = [i for i, c in enumerate(contexts) if c.role in path_roles]
            requests = [ActRequest(self.task, contexts[i].state, contexts[i].role,
                                   self.task.view(contexts[i].state, contexts[i].role)) for i in idx]
            for i, u in zip(idx, self.policies[adapter].act(requests)):
                said[i] = u
        roles = [c.role for c in contexts]
        scores, afters, turns = self.reward_model.score_details([c.state for c in contexts], roles,
                                                                [u.text for u in said])
        adv = group_advantages(torch.tensor(scores, dtype=torch.float32), groups, cfg.algorithm, roles=roles,
                               isolate=cfg.isolate)
        metrics = {"step": k}
        for role in sorted(set(roles)):
            metrics[f"reward/{role}"] = float(np.mean([s for s, r in zip(scores, roles) if r == role]))
        by_group = scores.reshape(-1, cfg.group_size)  # contexts are laid out group by group
        metrics["static/score_std"] = float(by_group.std(axis=1).mean())  # 0: no signal left for the group baseline
        metrics["static/ends_game"] = float(np.mean([a.done for a in afters]))
        metrics["static/invalid_rate"] = float(np.mean([t.invalid is not None for t in turns]))
        stops = set(self.tokenizer.all_special_ids)
        lm = [u for u in said if u.completion_ids]
        if lm:
            metrics["rollout/completion_tokens"] = float(np.mean([len(u.completion_ids) for u in lm]))
            metrics["rollout/truncated"] = float(np.mean([u.completion_ids[-1] not in stops for u in lm]))
        for adapter, path_roles in self.adapter_roles.items():
            samples = [Sample(c.role, u.prompt_ids, u.completion_ids, u.logprobs, a)
                       for c, u, a in zip(contexts, said, adv.tolist()) if c.role in path_roles and u.completion_ids]
            for n, v in self.update(adapter, samples).items():
                metrics[f"{adapter}/{n}"] = v
        self.step_count += 1
        return self._mean_over_processes(metrics)

    def config_dict(self) -> dict:
        out = super().config_dict()
        out["static"] = {"contexts": len(self.pool), "reward_model": self.reward_model.fit_report}
        return out
