"""Named random streams (dialogrl.seeds) and common random numbers: a game seeded by its own key plays the same in any
batch, order or evaluation; training steps never share a scenario id; the games of one group draw apart."""
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from dialogrl.agents import LMAgent, VerbalizedSampling
from dialogrl.agents.sampling import counting_forwards
from dialogrl.envs import DealOrNoDeal, social
from dialogrl.envs.dealnodeal import ScriptedAgent
from dialogrl.envs.social import SocialScenes
from dialogrl.evaluate import cross_play
from dialogrl.game import Agent, Population, game_key
from dialogrl.models import load_model
from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer
from dialogrl.rollout import play, play_cells
from dialogrl.seeds import STREAMS, stream_seed

TASK = DealOrNoDeal(max_turns=6)


@pytest.fixture(scope="module")
def dond_lm(dond_toy_dir):
    return load_model(str(dond_toy_dir), device="cpu")


def games(episodes):
    """What a game is, exactly: every turn's role, text and sampled ids, how it ended and the outcome."""
    return [([(t.role, t.text, t.completion_ids) for t in e.state.turns], e.state.end_reason, e.outcome)
            for e in episodes]


def logprobs(episodes):
    return [lp for e in episodes for t in e.state.turns for lp in (t.logprobs or [])]


# ------------------------------------------------------------------------------------------------ stream seeds

def test_stream_seed_is_stable_across_processes_and_distinct_across_streams():
    assert stream_seed("tokens", 1, "A") == 8186523714579110612   # blake2b: the same on every machine and process
    other = subprocess.run([sys.executable, "-c", "from dialogrl.seeds import stream_seed as s; print(s('tokens', 1, "
                            "'A'))"], capture_output=True, text=True, env={"PYTHONHASHSEED": "123"}, check=True)
    assert int(other.stdout) == 8186523714579110612
    assert stream_seed("tokens", np.int64(1), "A") == stream_seed("tokens", 1, "A")
    assert len({stream_seed(s, 0, 1) for s in STREAMS}) == len(STREAMS)
    keys = [(0, 1, "A", "fair"), (0, 1, "B", "fair"), (0, 2, "A", "fair"), (1, 1, "A", "fair"), (0, 1, "A", "greedy")]
    seeds = [stream_seed("eval-games", *k) for k in keys]
    assert len(set(seeds)) == len(keys) and all(0 <= s < 2**63 for s in seeds)
    assert stream_seed("train-games", 0, 1, 23) != stream_seed("train-games", 0, 12, 3)   # keys never run together
    with pytest.raises(ValueError, match="unknown random stream 'eval'.*eval-games"):
        stream_seed("eval", 0)
    with pytest.raises(TypeError, match="keys are ints or strings"):
        stream_seed("tokens", 0.5)


def test_games_of_one_scenario_draw_apart_with_seeds_and_alike_without():
    """A scenario group's games (the same scenario several times): each with its own seed, the scripted agents'
    private draws (talk, thresholds) differ; without seeds they key on the scenario and all games are one game."""
    task = SocialScenes()
    scenario = task.sample_scenarios(1, seed=0)[0]
    agents = {"agent": social.ScriptedAgent("hesitant", seed=1), "partner": social.ScriptedAgent(None, seed=2)}
    seeded = play(task, agents, [scenario] * 12, seeds=[stream_seed("train-games", 0, 0, j) for j in range(12)])
    plain = play(task, agents, [scenario] * 12)
    assert len({str(g) for g in games(seeded)}) > 6 and len({str(g) for g in games(plain)}) == 1
    assert game_key(seeded[0].state, "counterpart") == stream_seed("counterpart", seeded[0].state.seed)
    assert game_key(plain[0].state, "counterpart") == scenario.id
    assert seeded[0].transcript()["seed"] == seeded[0].state.seed


# -------------------------------------------------------------------------------------------------- evaluation

@pytest.mark.parametrize("counterpart", ["scripted", "lm", "vs"])
def test_the_first_50_games_of_an_80_game_evaluation_are_a_50_game_evaluation(dond_lm, counterpart):
    """Every game draws from its own seed (eval seed, scenario, role, counterpart): what else is evaluated, the
    batch it runs in, and torch's global generator change nothing."""
    model, tok = dond_lm
    policy = LMAgent(model, tok, max_new_tokens=16)
    other = {"scripted": lambda: ScriptedAgent("erratic", 1),
             "lm": lambda: LMAgent(model, tok, max_new_tokens=16, name="counterpart"),
             "vs": lambda: VerbalizedSampling(LMAgent(model, tok, max_new_tokens=16), k=2, retries=1)}[counterpart]
    n = 30 if counterpart == "vs" else 80   # VS asks up to twice per turn
    m = n * 5 // 8
    roles = None if counterpart == "scripted" else ["A"]   # (an LM in both roles: the same code twice)
    scenarios = TASK.sample_scenarios(n, seed=stream_seed("eval-scenarios", 0))
    assert scenarios[:m] == TASK.sample_scenarios(m, seed=stream_seed("eval-scenarios", 0))
    torch.manual_seed(1)
    rows_n, eps_n = cross_play(TASK, {"base": policy}, {counterpart: other()}, scenarios, roles, seed=7,
                               return_episodes=True)
    torch.manual_seed(2)   # another global state, another batch: the same games
    rows_m, eps_m = cross_play(TASK, {"base": policy}, {counterpart: other()}, scenarios[:m], roles, seed=7,
                               return_episodes=True)
    for cell, episodes in eps_m.items():
        assert games(eps_n[cell][:m]) == games(episodes), cell
        assert logprobs(eps_n[cell][:m]) == pytest.approx(logprobs(episodes), abs=1e-5)
    first = rows_n.groupby("role", sort=False).head(m).reset_index(drop=True)
    pd.testing.assert_frame_equal(first, rows_m)
    assert len({str(g) for g in games(eps_m["base", counterpart, "A"])}) > m // 2   # the games differ from each other


def test_methods_face_the_same_random_numbers_and_a_seed_replays_its_games(dond_lm):
    """The policy's name is not part of a game's key: two methods with the same weights play identical games
    (common random numbers); the same seeds replay the same games, in any order."""
    model, tok = dond_lm
    scenarios = TASK.sample_scenarios(12, seed=3)
    a, b = LMAgent(model, tok, max_new_tokens=16), LMAgent(model, tok, max_new_tokens=16)
    _, played = cross_play(TASK, {"base": a, "trained": b}, {"fair": ScriptedAgent("fair", 0)}, scenarios,
                           return_episodes=True)
    for role in TASK.roles:
        assert games(played["base", "fair", role]) == games(played["trained", "fair", role])
    seeds = [stream_seed("eval-games", 9, k) for k in range(12)]
    agents = {"A": a, "B": a}
    once, again = play(TASK, agents, scenarios, seeds=seeds), play(TASK, agents, scenarios[::-1], seeds=seeds[::-1])
    assert games(once) == games(again[::-1]) and logprobs(once) == pytest.approx(logprobs(again[::-1]), abs=1e-5)
    assert games(play(TASK, agents, scenarios[:1], seeds=seeds[:1])) == games(once[:1])
    with pytest.raises(ValueError, match="one seed per game"):
        play(TASK, agents, scenarios, seeds=seeds[:3])


def test_lm_agents_keep_one_token_stream_per_game_and_role(dond_lm):
    model, tok = dond_lm
    lm = LMAgent(model, tok)
    state, seedless = TASK.reset(TASK.sample_scenarios(1, seed=0)[0]), TASK.reset(TASK.sample_scenarios(1, seed=0)[0])
    state.seed = 5
    assert lm.rng(state, "A") is lm.rng(state, "A") and lm.rng(state, "A") is not lm.rng(state, "B")
    assert lm.rng(seedless, "A") is None
    lm.clear_cache()
    assert lm._rngs == {}


# ---------------------------------------------------------------------------------------------------- training

def test_no_two_training_steps_share_a_scenario_id_and_every_dialogue_has_its_own_seed(dond_toy_dir):
    model, tok = load_model(str(dond_toy_dir), adapters=["A"], device="cpu", lora_r=4)
    cfg = TrainConfig(steps=8, scenarios_per_step=4, group_size=3, seed=1)
    trainer = Trainer(TASK, model, tok, {"A": RoleSpec(adapter="A", trainable=True),
                                         "B": RoleSpec(agent=ScriptedAgent("fair"))}, cfg)
    drawn = [trainer.scenarios(step) for step in range(cfg.steps)]
    ids = [{sc.id for sc in scenarios} for scenarios, _, _ in drawn]
    assert all(len(i) == cfg.scenarios_per_step for i in ids) and len(set().union(*ids)) == 8 * 4
    seeds = [s for _, _, step_seeds in drawn for s in step_seeds]
    assert len(set(seeds)) == len(seeds) == 8 * 4 * 3
    assert [sc.id for sc in drawn[2][0]] == [8, 8, 8, 9, 9, 9, 10, 10, 10, 11, 11, 11]
    # two processes share a step's groups between them and draw the very same dialogues
    split = []
    for rank in (0, 1):
        trainer.accelerator = SimpleNamespace(process_index=rank, num_processes=2)
        scenarios, _, step_seeds = trainer.scenarios(2)
        split += list(zip([sc.id for sc in scenarios], step_seeds))
    assert sorted(split) == sorted(zip([sc.id for sc in drawn[2][0]], drawn[2][2]))


def test_panel_eval_plays_each_member_alike_alone_and_restores_every_rng_state(dond_toy_dir, monkeypatch):
    """Each member's games key on (seed, scenario, role, member): a panel of one gives that member's numbers of the
    whole panel. The evaluation restores python's, numpy's, torch's and (where there is CUDA) CUDA's RNG states;
    a stand-in CUDA RNG here records that it was saved and restored."""
    import random

    from dialogrl.evaluate import panel_eval

    model, tok = load_model(str(dond_toy_dir), adapters=["A"], device="cpu", lora_r=4)
    trainer = Trainer(TASK, model, tok, {"A": RoleSpec(adapter="A", trainable=True),
                                         "B": RoleSpec(agent=ScriptedAgent("fair"))},
                      TrainConfig(steps=1, scenarios_per_step=2, group_size=2, max_new_tokens=12))
    scenarios = TASK.sample_scenarios(6, seed=stream_seed("eval-scenarios", 0))
    panel = {"fair": ScriptedAgent("fair"), "lm": LMAgent(model, tok, max_new_tokens=12, name="lm")}
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: calls.append("get") or ["cuda state"])
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: calls.append(("set", states)))
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    out = panel_eval(TASK, "A", panel, scenarios, seed=4)(trainer)
    assert calls == ["get", ("set", ["cuda state"])]
    assert random.getstate() == before[0] and np.array_equal(np.random.get_state()[1], before[1])
    assert torch.equal(torch.get_rng_state(), before[2])
    alone = panel_eval(TASK, "A", {"lm": panel["lm"]}, scenarios, seed=4)(trainer)
    assert alone["lm/score"] == out["lm/score"] and alone["lm/reward"] == out["lm/reward"]


@pytest.mark.parametrize("counterpart", ["vs", "population"])
def test_wrapped_counterparts_stream_with_the_batch(dond_lm, counterpart):
    """Verbalized Sampling answers (and their re-asks) and a population's language-model members join the running
    batch: a batch of games takes about the forward passes of its longest game played alone, one pass a round per
    running batch (the policy's and each language-model member's), not the passes of turns written while every
    other game waits (the same wrapper driven as a blocking agent: at 64 games past that bound; measured 2026-12-05:
    VS 325 passes against 798 blocking, the longest game alone 192; the population 336 against 422, alone 120)."""
    model, tok = dond_lm
    policy = LMAgent(model, tok, max_new_tokens=16)

    def vs():
        if counterpart == "population":   # two members on one model (two batches), one scripted
            return Population({"sim-0": LMAgent(model, tok, max_new_tokens=24, name="sim-0"),
                               "sim-1": LMAgent(model, tok, max_new_tokens=24, temperature=0.5, name="sim-1"),
                               "fair": ScriptedAgent("fair")}, seed=1)
        return VerbalizedSampling(LMAgent(model, tok, max_new_tokens=24, name="sim"), k=2, retries=1)

    class Blocking(Agent):   # the same wrapper behind the plain Agent interface: each group's answers in one call
        name = "blocking"

        def __init__(self, agent):
            self.agent = agent

        def act(self, requests):
            return self.agent.act(requests)

    scenarios = TASK.sample_scenarios(64, seed=3)
    seeds = [stream_seed("eval-games", 0, i) for i in range(len(scenarios))]
    alone = []
    for scenario, seed in zip(scenarios, seeds):
        with counting_forwards() as c:
            play(TASK, {"A": policy, "B": vs()}, [scenario], seeds=[seed])
        alone.append(c.n)
    with counting_forwards() as streamed:
        episodes = play(TASK, {"A": policy, "B": vs()}, scenarios, seeds=seeds)
    with counting_forwards() as blocked:
        play(TASK, {"A": policy, "B": Blocking(vs())}, scenarios, seeds=seeds)
    batches = 3 if counterpart == "population" else 2   # the policy's and each language-model member's
    assert streamed.n <= batches * max(alone) < blocked.n   # at 64 games the blocking calls are past that bound
    assert all(e.state.done for e in episodes)


def test_a_cap_on_live_games_bounds_the_batches_and_changes_no_game(dond_lm):
    """play(max_live=k) starts the next game as one ends: never more than k games in the agents' batches (their KV
    caches), and seeded games play exactly as they do all at once."""
    model, tok = dond_lm

    def agents():
        return {"A": LMAgent(model, tok, max_new_tokens=16), "B": LMAgent(model, tok, max_new_tokens=16, name="b")}

    scenarios = TASK.sample_scenarios(12, seed=4)
    seeds = [stream_seed("eval-games", 0, i) for i in range(len(scenarios))]
    free = play(TASK, agents(), scenarios, seeds=seeds)
    made, rows = agents(), []
    for agent in made.values():
        def submit(requests, inner=agent.submit):
            inner(requests)
            rows.append(sum(len(a._batch or []) for a in made.values()))   # rows live or queued, both agents
        agent.submit = submit
    capped = play(TASK, made, scenarios, seeds=seeds, max_live=3)
    assert games(capped) == games(free) and logprobs(capped) == pytest.approx(logprobs(free), abs=1e-5)
    assert max(rows) <= 3 and len(rows) > 12
    with pytest.raises(ValueError, match="max_live=0"):
        play(TASK, agents(), scenarios, seeds=seeds, max_live=0)


def test_cells_played_at_once_play_as_they_do_alone_in_fewer_passes(dond_lm):
    """play_cells: an LM counterpart's games against two policies (one scripted, one LM) share its batch: every game
    is the game the cell plays alone, and the passes are fewer than the cells' passes one after another."""
    model, tok = dond_lm
    counterpart = LMAgent(model, tok, max_new_tokens=16, name="counterpart")
    policies = [ScriptedAgent("fair", seed=0), LMAgent(model, tok, max_new_tokens=16, temperature=0.7, name="lm")]
    scenarios = TASK.sample_scenarios(10, seed=5)
    seeds = [stream_seed("eval-games", 0, i) for i in range(len(scenarios))]
    cells = [({"A": policy, "B": counterpart}, scenarios, seeds) for policy in policies]
    alone, passes = [], 0
    for pairing, mine, own in cells:
        with counting_forwards() as c:
            alone.append(play(TASK, pairing, mine, seeds=own))
        passes += c.n
    with counting_forwards() as together:
        played = play_cells(TASK, cells)
    assert [games(e) for e in played] == [games(e) for e in alone]
    assert logprobs(played[1]) == pytest.approx(logprobs(alone[1]), abs=1e-5)
    assert together.n < passes
    with pytest.raises(ValueError, match="agent mappings for"):
        play(TASK, [cells[0][0]], scenarios)


def test_cells_whose_wrappers_share_a_model_play_apart_and_as_alone(dond_lm):
    """Two Verbalized Sampling wrappers around one LMAgent (each hands back only the turns it asked for) cannot share
    a play: play_cells plays their cells one after another, each game as it plays alone."""
    model, tok = dond_lm
    lm = LMAgent(model, tok, max_new_tokens=24, name="sim")
    wrappers = [VerbalizedSampling(lm, k=2, retries=0, seed=s) for s in (0, 1)]
    scenarios = TASK.sample_scenarios(4, seed=6)
    seeds = [stream_seed("eval-games", 0, i) for i in range(len(scenarios))]
    cells = [({"A": ScriptedAgent("fair", seed=0), "B": w}, scenarios, seeds) for w in wrappers]
    alone = [play(TASK, pairing, mine, seeds=own) for pairing, mine, own in cells]
    assert [games(e) for e in play_cells(TASK, cells)] == [games(e) for e in alone]


@pytest.mark.parametrize("counterpart_adapter", ["B", None])
def test_agents_of_one_model_share_one_batch_and_play_as_they_do_apart(dond_toy_dir, counterpart_adapter):
    """LMAgents on one peft model (HF engine) decode in one batch, each row through its own adapter, temperature and
    turn length: every game is the game they play with a batch each (the adapters differ, so a row routed through
    the wrong one would show), in fewer forward passes. The counterpart is adapter B, or the base model."""
    model, tok = load_model(str(dond_toy_dir), adapters=["A", "B"], device="cpu", lora_r=4)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)   # the adapters start at zero (the base model): make each its own
    scenarios = TASK.sample_scenarios(12, seed=7)
    seeds = [stream_seed("eval-games", 0, i) for i in range(len(scenarios))]

    def pairing(share: bool) -> dict:
        return {"A": LMAgent(model, tok, adapter="A", max_new_tokens=16, lean=False, share_batch=share, name="a"),
                "B": LMAgent(model, tok, adapter=counterpart_adapter, max_new_tokens=10, temperature=0.7, lean=False,
                             share_batch=share, name="b")}

    with counting_forwards() as apart_passes:
        apart = play(TASK, pairing(False), scenarios, seeds=seeds)
    model.train()   # left in training mode (an SFT, an update): the batch decodes in eval mode and gives it back
    with counting_forwards() as shared_passes:
        shared = play(TASK, pairing(True), scenarios, seeds=seeds)
    assert model.training
    model.eval()
    assert games(shared) == games(apart)
    assert logprobs(shared) == pytest.approx(logprobs(apart), rel=1e-4)   # other batch sizes: float rounding
    assert max(len(t.completion_ids) for e in shared for t in e.state.turns if t.role == "B") <= 10
    assert shared_passes.n < 0.75 * apart_passes.n
    swapped = pairing(False)
    swapped["A"].adapter = "B" if counterpart_adapter == "B" else None
    assert games(play(TASK, swapped, scenarios, seeds=seeds)) != games(apart)   # the adapter matters
