"""Learning tests: RL against a scripted persona moves the metric it should (fixed seed, stated margin).

tiny-dond (role A, its own LoRA adapter) trains with a k3 KL penalty to the warm start (beta 0.1) against the
scripted "fair" persona for 30 steps of 32 games (about two CPU minutes), once with the group baseline (GRPO) and once
with PPO (a value head and turn-level GAE); its mean score against "fair" on 400 held-out scenarios must rise by at
least 0.4 points (paired by scenario), with the paired interval above zero.

The margin holds across builds, not for one: a fresh machine builds tiny-dond anew, and a rebuild differs like
another training run. Measured on three builds (this test's body on `build_tiny_model("tiny-dond", build_seed=b)`,
b = 0, 1, 2), the paired gain was GRPO +1.19 / +0.96 / +0.93 and PPO +0.94 / +0.76 / +0.89 (interval half-widths
about 0.38), so the smallest gain is about twice the margin. Without the KL term some seeds collapse (every group ends
with equal zero rewards and GRPO has no signal left).
"""
import pandas as pd
import pytest

from dialogrl.agents import LMAgent
from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import ScriptedAgent
from dialogrl.evaluate import game_rows, paired_difference
from dialogrl.models import load_model
from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer
from dialogrl.rollout import play
from dialogrl.run import seed_everything

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_rl_against_a_persona_raises_the_score(algorithm):
    task = DealOrNoDeal()
    seed_everything(0)
    model, tok = load_model("tiny-dond", adapters=["A"], device="cpu", lora_r=8, lora_alpha=16)
    held_out = task.sample_scenarios(400, seed=10_000)

    def evaluate(adapter, label):
        seed_everything(123)
        eps = play(task, {"A": LMAgent(model, tok, adapter=adapter), "B": ScriptedAgent("fair", 0)}, held_out)
        return pd.DataFrame(game_rows(task, eps, "A", policy=label, counterpart="fair"))

    before = evaluate(None, "base")  # adapter None: the warm start itself
    trainer = Trainer(task, model, tok,
                      {"A": RoleSpec(adapter="A", trainable=True, lr=1e-3),
                       "B": RoleSpec(agent=ScriptedAgent("fair", 1))},
                      TrainConfig(steps=30, scenarios_per_step=8, group_size=4, algorithm=algorithm, kl_coef=0.1,
                                  seed=0))
    seed_everything(0)
    rows = trainer.train(progress=False)
    after = evaluate("A", "rl")
    diff = paired_difference(pd.concat([before, after]), "rl", "base", "score")
    print(f"{algorithm}: score vs fair: {before.score.mean():.2f} -> {after.score.mean():.2f}, paired diff {diff}")
    assert len(rows) == 30
    assert diff["diff"] >= 0.4 and diff["lo"] > 0


def test_rl_against_one_persuadee_raises_its_donation_rate():
    """Persuasion for Good: tiny-persuasion's persuader (its own LoRA adapter, lr 2e-3, k3 KL beta 0.05) trains
    against the scripted `skeptical` persuadee for 30 steps of 32 games (GRPO, about 80 s on 2 CPU cores, 115 s on
    one); the share of 400 held-out scenarios in which that persuadee gives must rise by at least 4.5 points, paired
    interval above zero.

    Measured 2026-12-02 with one thread, as `make test`'s workers run it, on three builds
    (`build_tiny_model("tiny-persuasion", build_seed=b)`, b = 0, 1, 2): +15.3, +9.5 and +15.0 points (interval
    half-widths about 4; build 0 with two threads +14.0), so the smallest gain is twice the margin. At lr 1e-3 (the
    earlier setting, measured at +9 to +11 before the named random streams) build 0 gained only +4.0 with one thread
    and +6.8 with two: CI failed on it.
    """
    from dialogrl.envs.persuasion import PersuasionAgent, PersuasionForGood

    task = PersuasionForGood()
    seed_everything(0)
    model, tok = load_model("tiny-persuasion", adapters=["policy"], device="cpu", lora_r=8, lora_alpha=16)
    held_out = task.sample_scenarios(400, seed=10_000)

    def evaluate(adapter, label):
        seed_everything(123)
        eps = play(task, {"persuader": LMAgent(model, tok, adapter=adapter),
                          "persuadee": PersuasionAgent("skeptical", 0)}, held_out)
        return pd.DataFrame(game_rows(task, eps, "persuader", policy=label, counterpart="skeptical"))

    before = evaluate(None, "base")
    trainer = Trainer(task, model, tok, {"persuader": RoleSpec(adapter="policy", trainable=True, lr=2e-3),
                                         "persuadee": RoleSpec(agent=PersuasionAgent("skeptical", 1))},
                      TrainConfig(steps=30, scenarios_per_step=8, group_size=4, kl_coef=0.05, seed=0))
    seed_everything(0)
    rows = trainer.train(progress=False)
    after = evaluate("policy", "rl")
    diff = paired_difference(pd.concat([before, after]), "rl", "base", "success")
    print(f"success vs skeptical: {before.success.mean():.3f} -> {after.success.mean():.3f}, paired diff {diff}")
    assert len(rows) == 30 and all("zero_std_group_pct/persuader" in r for r in rows)
    assert diff["diff"] >= 0.045 and diff["lo"] > 0


def test_ppo_with_process_rewards_raises_goal_achievement_against_one_partner():
    """Social scenes: tiny-social's agent (its own LoRA adapter and value head) trains with SocialRL's PPO (turn-level
    GAE, gamma = lambda = 0.95, the utterance-level ratio, two optimizer steps per rollout so that the clip acts, as
    notebook 02 runs it, 0.3 x the rule judge's stage-weighted process reward per turn plus the outcome) against the
    scripted `guarded` partner for 40 steps of 32 games (about 2 minutes on 2 CPU cores with its evaluation); the
    share of 400 held-out scenarios that end in its full agreement must rise by at least 6.5 points, paired interval
    above zero, and the clip must have acted (mean clipfrac above zero).

    Measured on three builds (`build_tiny_model("tiny-social", build_seed=b)`, b = 0, 1, 2) with two optimizer steps
    per rollout (2026-12-01, named random streams): +17.0, +14.8 and +29.5 points at 40 steps (interval half-widths
    about 4; the relationship +0.56, +0.55, +0.90; mean clipfrac 0.008-0.018), so the smallest gain is more than
    twice the margin; at 60 steps +23.3, +29.3, +28.8. The margin stays where it was set for one optimizer step per
    rollout and 60 steps (+13.5, +16.3, +17.5 on the same builds then; 30 steps: +3.0 [-1.0, +7.3] on build 0).
    """
    from dialogrl.envs.social import SocialAgent, SocialScenes
    from dialogrl.envs.social.judge import RuleJudge
    from dialogrl.rewards import ProcessReward

    task = SocialScenes(partners=["guarded"])
    seed_everything(0)
    model, tok = load_model("tiny-social", adapters=["policy"], device="cpu", lora_r=8, lora_alpha=16)
    held_out = task.sample_scenarios(400, seed=10_000)

    def evaluate(adapter, label):
        seed_everything(123)
        eps = play(task, {"agent": LMAgent(model, tok, adapter=adapter), "partner": SocialAgent(None, 0)}, held_out)
        return pd.DataFrame(game_rows(task, eps, "agent", policy=label, counterpart="guarded"))

    before = evaluate(None, "base")
    trainer = Trainer(task, model, tok, {"agent": RoleSpec(adapter="policy", trainable=True, lr=1e-3),
                                         "partner": RoleSpec(agent=SocialAgent(None, 1))},
                      TrainConfig(steps=40, scenarios_per_step=8, group_size=4, algorithm="ppo", gamma=0.95,
                                  lam=0.95, ratio_level="utterance", minibatches=2, seed=0),
                      turn_rewards=ProcessReward(RuleJudge(), task, schedule="dynamic", coef=0.3))
    seed_everything(0)
    rows = trainer.train(progress=False)
    after = evaluate("policy", "rl")
    diff = paired_difference(pd.concat([before, after]), "rl", "base", "success")
    rel = paired_difference(pd.concat([before, after]), "rl", "base", "relationship")
    print(f"goal rate vs guarded: {before.success.mean():.3f} -> {after.success.mean():.3f}, paired diff {diff}; "
          f"relationship {before.relationship.mean():+.2f} -> {after.relationship.mean():+.2f}, {rel}")
    assert len(rows) == 40 and all("policy/explained_variance" in r for r in rows)
    assert sum(r["policy/clipfrac"] for r in rows) > 0, "two optimizer steps per rollout: the clip must act"
    assert diff["diff"] >= 0.065 and diff["lo"] > 0
