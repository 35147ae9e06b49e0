"""Static Context RL: cutting logged games into contexts, the turn-level reward model, and training steps."""
import pytest
import torch

from conftest import small_build
from dialogrl.envs import DealOrNoDeal
from dialogrl.game import Task
from dialogrl.models import adapter_parameters, load_model
from dialogrl.rl.static import StaticContextTrainer, TurnRewardModel, cut_contexts, persona_logs
from dialogrl.rl.trainer import RoleSpec, TrainConfig
from dialogrl.run import seed_everything

TASK = DealOrNoDeal()


@pytest.fixture(scope="module")
def logs():
    return persona_logs(TASK, 300, seed=500_000)


@pytest.fixture(scope="module")
def reward_model(logs):
    return TurnRewardModel(TASK, seed=0).fit(cut_contexts(TASK, logs))


def test_contexts_are_proper_prefixes_of_the_logs(logs):
    games = logs[:40]
    contexts = cut_contexts(TASK, games)
    assert len(contexts) == sum(len(g.talk_turns()) for g in games)
    assert len(cut_contexts(TASK, games, roles=["B"])) == sum(len(g.talk_turns()) // 2 for g in games)
    spread = cut_contexts(TASK, games, roles=["B"], n=7)   # n of them, evenly spread: the first and the last kept
    every = cut_contexts(TASK, games, roles=["B"])
    assert len(spread) == 7 and (spread[0].game, spread[0].k) == (every[0].game, every[0].k)
    assert (spread[-1].game, spread[-1].k) == (every[-1].game, every[-1].k)
    assert len(cut_contexts(TASK, games[:1], roles=["B"], n=10**6)) == len(games[0].talk_turns()) // 2
    for c in contexts:
        logged = games[c.game].talk_turns()
        assert c.k < len(logged) and len(c.state.turns) == c.k and not c.state.done
        assert [t.text for t in c.state.turns] == [t.text for t in logged[:c.k]]
        assert c.role == logged[c.k].role == TASK.current_role(c.state) and c.text == logged[c.k].text
        assert c.reward == TASK.outcome(games[c.game])[c.role]["reward"]
    # the bookkeeping is the prefix's: the standing offer is the last proposal before turn k
    c = next(c for c in contexts if c.k == 1)
    assert c.state.info["offer"] == (TASK.roles[0], games[c.game].turns[0].action["share"])
    assert "offer" not in next(c for c in contexts if c.k == 0).state.info


def test_reward_model_beats_a_constant_on_held_out_games(reward_model):
    report = reward_model.fit_report
    assert report["games_test"] == 60 and report["n_test"] > 200
    assert report["r2_learned"] > 0.2 and report["r2"] > 0.2   # R^2 = 0: the held-out mean
    assert report["mae"] < report["target_std"]


def test_scoring_applies_the_candidate_with_the_tasks_rules(reward_model):
    scenario = TASK.sample_scenarios(1, seed=7)[0]
    va = scenario.values[0]
    best_for_a = tuple(c if v > 0 else 0 for c, v in zip(scenario.counts, va))  # A's share: all it values
    state = TASK.reset(scenario)
    TASK.step(state, "i'd like to start.")
    TASK.step(state, "take these. [propose " + " ".join(
        f"{item}={c - s}" for item, c, s in zip(("book", "hat", "ball"), scenario.counts, best_for_a)) + "]")
    texts = ["deal. [accept]", "no. [no deal]", "hmm [accept] [accept]", "what about this?"]
    scores = reward_model.score([state] * 4, ["A"] * 4, texts)
    assert len(state.turns) == 2 and not state.done  # the prefix itself is left as it was
    assert scores[0] == 10.0 and scores[1] == 0.0      # finished games: the rules' own outcome
    assert scores[2] == pytest.approx(scores[3] - TASK.invalid_penalty)  # a rule break: no effect, and the penalty


def test_turn_features_default_names_the_task():
    class Bare(Task):
        name = "bare"
    with pytest.raises(NotImplementedError, match="'bare'"):
        Bare().turn_features(None, "A")


def test_bad_static_setups_are_named(logs, reward_model):
    contexts = cut_contexts(TASK, logs[:5])
    trained_a = {"A": RoleSpec(adapter="A", trainable=True)}
    with pytest.raises(ValueError, match="group baselines"):
        StaticContextTrainer(TASK, None, None, trained_a, TrainConfig(algorithm="ppo"), contexts=contexts,
                             reward_model=reward_model)
    with pytest.raises(ValueError, match="fitted TurnRewardModel"):
        StaticContextTrainer(TASK, None, None, trained_a, contexts=contexts, reward_model=TurnRewardModel(TASK))
    with pytest.raises(ValueError, match="no logged contexts"):
        StaticContextTrainer(TASK, None, None, trained_a, contexts=[c for c in contexts if c.role == "B"],
                             reward_model=reward_model)


def test_two_static_steps_move_only_the_trained_adapter(logs, reward_model):
    seed_everything(0)
    model, tok = load_model(str(small_build("tiny-dond")), adapters=["A", "B"], device="cpu", lora_r=4)
    config = TrainConfig(steps=2, scenarios_per_step=2, group_size=4, max_new_tokens=16, kl_coef=0.1)
    trainer = StaticContextTrainer(TASK, model, tok, {"A": RoleSpec(adapter="A", trainable=True, lr=1e-2)}, config,
                                   contexts=cut_contexts(TASK, logs[:50]), reward_model=reward_model)
    assert {c.role for c in trainer.pool} == {"A"} and not trainer.roles["B"].trainable
    a_before = {n: p.detach().clone() for n, p in adapter_parameters(model, "A").items()}
    b_before = {n: p.detach().clone() for n, p in adapter_parameters(model, "B").items()}
    rows = trainer.train(progress=False)
    assert len(rows) == 2 and trainer.step_count == 2
    assert {"reward/A", "A/loss", "A/kl", "static/score_std", "static/invalid_rate"} <= set(rows[0])
    assert any(not torch.equal(p, a_before[n]) for n, p in adapter_parameters(model, "A").items())
    assert all(torch.equal(p, b_before[n]) for n, p in adapter_parameters(model, "B").items())
    assert trainer.config_dict()["static"]["reward_model"]["model"] in ("ridge", "hgb")
