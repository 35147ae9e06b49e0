"""Learning tests: RL against a scripted counterpart moves the metric it should (fixed seed, stated margin).

Each test's body is a function of the warm start's build seed (`dond_gain`, `persuasion_gain`, `social_gain`), so
that `bench/learning_margin.py` runs the same body on other builds: the margin must hold across builds, not for one
(a fresh machine builds the tiny models anew, and a rebuild differs like another training run). The tests train on
the test builds (`size="test"`: conftest.small_build, half of the full corpora or less), which take minutes to build
on one thread where the full ones take 10 to 20: the suite on an empty model cache (issue 29). A test build's margin
is measured on its own builds 0, 1, 2, as the full ones' were.
"""
from __future__ import annotations

import pandas as pd
import pytest

from conftest import small_build
from dialogrl.agents import LMAgent
from dialogrl.evaluate import game_rows
from dialogrl.models import load_model
from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer
from dialogrl.rollout import play
from dialogrl.run import seed_everything
from dialogrl.stats import paired_difference
from dialogrl.tiny import build_tiny_model

pytestmark = pytest.mark.slow

HELD_OUT = 400  # held-out evaluation scenarios (paired by scenario before and after training)
# Margins, each about half the smallest gain measured on builds 0, 1, 2 of the size the test trains on (the bodies'
# docstrings): the test builds of tiny-dond, tiny-persuasion and tiny-social
DOND_MARGIN = 0.28
PERSUASION_MARGIN = 0.04
SOCIAL_MARGIN = 0.05
# Each test's budget and learning rate: of the budgets measured (16, 24, 32 games a step; the persuasion test's also
# 30 and 45 steps), the cheapest at which its margin holds on builds 0, 1, 2 (bench/learning_margin.py --set measures
# a candidate). The social test's is the demo notebook's too (tests/test_demo.py checks it).
DOND_GRPO_SETUP = {"steps": 30, "scenarios_per_step": 6, "group_size": 4, "lr": 1e-3}
DOND_PPO_SETUP = {"steps": 30, "scenarios_per_step": 6, "group_size": 4, "lr": 1e-3}
PERSUASION_SETUP = {"steps": 45, "scenarios_per_step": 8, "group_size": 4, "lr": 2e-3}
SOCIAL_SETUP = {"steps": 40, "scenarios_per_step": 4, "group_size": 4, "lr": 1e-3}


def _budget(setup: dict) -> dict:
    return {k: setup[k] for k in ("steps", "scenarios_per_step", "group_size")}


def warm_start(name: str, build_seed: int = 0, adapter: str = "policy", size: str = "full"):
    """The warm start of `name` at `build_seed` (size full: the named recipe; test: its test build) with one fresh
    LoRA adapter: (model, tokenizer)."""
    if size not in ("full", "test"):
        raise ValueError(f"size={size!r}: full or test")
    path = small_build(name, build_seed) if size == "test" else build_tiny_model(name, build_seed=build_seed)
    seed_everything(0)
    return load_model(str(path), adapters=[adapter], device="cpu", lora_r=8, lora_alpha=16)


def _train_and_compare(task, model, tok, roles, config, role, counterpart, metric, turn_rewards=None):
    """Evaluate the warm start against `counterpart` on the held-out scenarios, train, evaluate the adapter on the
    same scenarios: (paired difference rl - base of `metric`, the training rows, the two evaluations)."""
    held_out = task.sample_scenarios(HELD_OUT, seed=10_000)
    adapter = roles[role].adapter

    def evaluate(use_adapter, label):
        seed_everything(123)
        eps = play(task, {role: LMAgent(model, tok, adapter=use_adapter), **counterpart()}, held_out)
        return pd.DataFrame(game_rows(task, eps, role, policy=label, counterpart="scripted"))

    before = evaluate(None, "base")  # adapter None: the warm start itself
    trainer = Trainer(task, model, tok, roles, config, turn_rewards=turn_rewards)
    seed_everything(0)
    rows = trainer.train(progress=False)
    after = evaluate(adapter, "rl")
    both = pd.concat([before, after])
    return paired_difference(both, "rl", "base", metric), rows, both


def dond_gain(algorithm: str, build_seed: int = 0, size: str = "full"):
    """Deal or No Deal: tiny-dond (role A, its own LoRA adapter) trains with a k3 KL penalty to the warm start (beta
    0.1) against the scripted "fair" persona for 30 steps, with the group baseline (grpo, 24 games a step) or PPO (a
    value head and turn-level GAE, 24 games a step). Returns (paired score difference after - before against "fair",
    training rows).

    Measured 2026-12-04 with one thread on the test builds 0, 1, 2 (4500 dialogues; the tests' size) at 32 games a
    step: GRPO +1.01, +1.47, +0.56 [+0.19, +0.92], PPO +1.06, +1.73, +1.02 (interval half-widths about 0.38); at 16
    (2026-12-04, two bodies at once): PPO +0.60 [+0.20, +1.01], +0.76, +0.76 in 1.3-2.0 minutes each from a cached
    build (3.1 at 32), GRPO +1.53, +0.11 [-0.30, +0.54], +0.96, too weak on build 1; GRPO at 24 (the same day): +1.35,
    +0.68 [+0.28, +1.06], +0.79. The smallest gain at the tests' budgets (GRPO's 0.68, PPO's 0.60) is twice
    DOND_MARGIN. On the full builds (9000 dialogues): GRPO +1.19 / +0.96 / +0.93, PPO +0.94 / +0.76 / +0.89; on
    builds of 3000 (2026-12-06) GRPO gained +0.95, +0.98 and +0.61 but PPO +0.32 [-0.06, +0.71], +0.82 and +0.44
    (too weak on build 0: the tests keep 4500); on builds of 2000 GRPO gained +1.10, +0.51 and +0.24 [-0.16, +0.63]
    (too weak), and on the 200-dialogue smoke builds, whose warm start writes no valid offer, +0.00. Without the KL
    term some seeds collapse (every group ends with equal zero rewards and GRPO has no signal left). PPO trained at 16
    until 2026-12-07, when the LoRA gradients through the low rank (the same products in another float order) moved
    its build 0 to +0.345 [-0.055, +0.743] (builds 1, 2: +0.76, +0.76): 16 sat at the edge. Measured the same day on
    the test builds, one thread: PPO at 24 +1.325, +0.77 [+0.35, +1.17], +0.995 (0.9-1.1 min each), at 32 +1.00,
    +0.69, +0.85; the test trains at 24 (the smallest gain 2.75 times DOND_MARGIN)."""
    from dialogrl.envs import DealOrNoDeal
    from dialogrl.envs.dealnodeal import ScriptedAgent

    task = DealOrNoDeal()
    model, tok = warm_start("tiny-dond", build_seed, adapter="A", size=size)
    setup = DOND_PPO_SETUP if algorithm == "ppo" else DOND_GRPO_SETUP
    roles = {"A": RoleSpec(adapter="A", trainable=True, lr=setup["lr"]), "B": RoleSpec(agent=ScriptedAgent("fair", 1))}
    config = TrainConfig(**_budget(setup), algorithm=algorithm, kl_coef=0.1, seed=0)
    diff, rows, both = _train_and_compare(task, model, tok, roles, config, "A",
                                          lambda: {"B": ScriptedAgent("fair", 0)}, "score")
    print(f"{algorithm}, build {build_seed}: score vs fair {both.groupby('policy').score.mean().to_dict()}, {diff}")
    return diff, rows


def persuasion_gain(build_seed: int = 0, size: str = "full"):
    """Persuasion for Good: tiny-persuasion's persuader (its own LoRA adapter, lr 2e-3, k3 KL beta 0.05) trains
    against the scripted `skeptical` persuadee for 45 steps of 32 games (GRPO). Returns (paired difference of the
    share of held-out scenarios in which that persuadee gives, training rows).

    Measured 2026-12-06 with one thread on the test builds 0, 1, 2 (1000 dialogues; the test's size):
    +10.75, +8.5 and +9.25 points (intervals [+6.5, +15.0], [+4.5, +12.75], [+4.75, +13.5]; base 0.435, 0.4525,
    0.45), so the smallest gain is about twice PERSUASION_MARGIN; 4.8-5.3 minutes each, the build (2.2) included. On
    the test builds of 2000 dialogues (the test's size until 2026-12-06, its build 3.8 minutes; 2026-12-05): +16.25,
    +23.25 and +9.75 points (intervals [+12.25, +21.0], [+18.75, +27.5], [+5.75, +13.75]; base 0.46, 0.45, 0.46;
    margin 0.05); at 30 steps the same builds gained +9.5, +22.25 and +3.25
    [-0.75, +7.25]: too little on build 2, so the test takes 45. Earlier recipes (two passes, no notes; 30 steps):
    +10.5, +10.75 and +13.25 points on the test builds (2026-12-04), +15.3, +9.5 and +15.0 on the full builds
    (2026-12-02); at lr 1e-3 the full build 0 gained only +4.0 with one thread and +6.8 with two (CI failed on it); at
    16 games a step +7.5, +5.0 [+1.0, +9.25] and +13.5, at 24 +5.75, +5.0 [+1.25, +8.75] and +7.5, too close to zero
    on build 1: the test keeps 32."""
    from dialogrl.envs.persuasion import PersuasionForGood, ScriptedAgent

    task = PersuasionForGood()
    model, tok = warm_start("tiny-persuasion", build_seed, size=size)
    roles = {"persuader": RoleSpec(adapter="policy", trainable=True, lr=PERSUASION_SETUP["lr"]),
             "persuadee": RoleSpec(agent=ScriptedAgent("skeptical", 1))}
    config = TrainConfig(**_budget(PERSUASION_SETUP), kl_coef=0.05, seed=0)
    diff, rows, both = _train_and_compare(task, model, tok, roles, config, "persuader",
                                          lambda: {"persuadee": ScriptedAgent("skeptical", 0)}, "success")
    print(f"build {build_seed}: donation rate vs skeptical {both.groupby('policy').success.mean().to_dict()}, {diff}")
    return diff, rows


def social_gain(build_seed: int = 0, size: str = "full"):
    """Social scenes: tiny-social's agent (its own LoRA adapter and value head) trains with SocialRL's PPO (turn-level
    GAE, gamma = lambda = 0.95, the utterance-level ratio, two optimizer steps per rollout so that the clip acts, as
    notebook 02 runs it, 0.3 x the rule judge's stage-weighted process reward per turn plus the outcome) against the
    scripted `guarded` partner for 40 steps of 16 games. Returns (paired difference of the share of held-out
    scenarios that end in its full agreement, training rows).

    Measured 2026-12-04 with one thread on the test builds 0, 1, 2 (3000 dialogues; the test's size), two bodies at
    once: at 16 games a step +20.25, +16.25 and +11.0 points (intervals [+15.5, +25.0], [+11.5, +20.75], [+7.0,
    +15.5]; base rates 0.18-0.24; the relationship +0.40, +0.17, -0.27), so the smallest gain is about twice
    SOCIAL_MARGIN; 1.8-2.2 minutes each from a cached build. At 32 games a step: +24.5, +8.5 and +21.5 points
    ([+4.0, +13.0] on build 1), 6.3-6.8 minutes each, the build included. On builds of 2000 (2026-12-06; at 16):
    +14.25, +14.25 and +5.5 [+1.5, +9.25] (too close to zero on build 2: the test keeps 3000). On the full builds
    (2026-12-01): +17.0, +14.8 and +29.5 points at 40 steps (the relationship +0.56, +0.55, +0.90; mean clipfrac
    0.008-0.018); at 60 steps +23.3, +29.3, +28.8."""
    from dialogrl.envs.social import ScriptedAgent, SocialScenes
    from dialogrl.envs.social.judge import RuleJudge
    from dialogrl.rewards import ProcessReward

    task = SocialScenes(partners=["guarded"])
    model, tok = warm_start("tiny-social", build_seed, size=size)
    roles = {"agent": RoleSpec(adapter="policy", trainable=True, lr=SOCIAL_SETUP["lr"]),
             "partner": RoleSpec(agent=ScriptedAgent(None, 1))}
    config = TrainConfig(**_budget(SOCIAL_SETUP), algorithm="ppo", gamma=0.95, lam=0.95,
                         ratio_level="utterance", minibatches=2, seed=0)
    diff, rows, both = _train_and_compare(task, model, tok, roles, config, "agent",
                                          lambda: {"partner": ScriptedAgent(None, 0)}, "success",
                                          turn_rewards=ProcessReward(RuleJudge(), task, schedule="dynamic", coef=0.3))
    rel = paired_difference(both, "rl", "base", "relationship")
    print(f"build {build_seed}: goal rate vs guarded {both.groupby('policy').success.mean().to_dict()}, {diff}; "
          f"relationship {rel}")
    return diff, rows


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_rl_against_a_persona_raises_the_score(algorithm):
    """The score against "fair" on 400 held-out scenarios rises by at least DOND_MARGIN points, paired interval above
    zero (the gains measured on three builds: `dond_gain`)."""
    diff, rows = dond_gain(algorithm, size="test")
    assert len(rows) == 30
    assert diff["diff"] >= DOND_MARGIN and diff["lo"] > 0


def test_rl_against_one_persuadee_raises_its_donation_rate():
    """The persuadee's donation rate on 400 held-out scenarios rises by at least PERSUASION_MARGIN, paired interval
    above zero."""
    diff, rows = persuasion_gain(size="test")
    assert len(rows) == PERSUASION_SETUP["steps"] and all("zero_std_group_pct/persuader" in r for r in rows)
    assert diff["diff"] >= PERSUASION_MARGIN and diff["lo"] > 0


def test_ppo_with_process_rewards_raises_goal_achievement_against_one_partner():
    """The share of 400 held-out scenarios ending in full agreement rises by at least SOCIAL_MARGIN, paired interval
    above zero, and the clip acted (mean clipfrac above zero)."""
    diff, rows = social_gain(size="test")
    assert len(rows) == 40 and all("policy/explained_variance" in r for r in rows)
    assert sum(r["policy/clipfrac"] for r in rows) > 0, "two optimizer steps per rollout: the clip must act"
    assert diff["diff"] >= SOCIAL_MARGIN and diff["lo"] > 0

