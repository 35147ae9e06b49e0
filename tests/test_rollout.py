"""Scripted personas, populations, the corpus generator and the batched rollout engine."""
import pytest
import torch

from conftest import play_texts
from dialogrl.agents import LMAgent
from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import PERSONAS, ScriptedAgent, population
from dialogrl.envs.dealnodeal.corpus import dond_corpus
from dialogrl.models import load_model
from dialogrl.rollout import play
from dialogrl.run import seed_everything

TASK = DealOrNoDeal()


@pytest.fixture(scope="module")
def dond_toy(dond_toy_dir):
    return load_model(str(dond_toy_dir), device="cpu")


def test_every_persona_pair_plays_valid_games():
    scenarios = TASK.sample_scenarios(60, seed=1)
    rates = []
    for a in PERSONAS:
        for b in PERSONAS:
            m = TASK.metrics([e.state for e in play(TASK, {"A": ScriptedAgent(a, 1), "B": ScriptedAgent(b, 2)},
                                                    scenarios)])
            assert m["invalid_rate"] == 0  # personas never break the rules
            rates.append(m["agreement"])
    assert sum(rates) / len(rates) > 0.8  # they mostly reach deals, as human negotiators do (~80%)


def test_a_runaway_turn_is_cut_before_the_rules_parse_it_and_counted():
    from dialogrl.game import Agent
    from dialogrl.rollout import MAX_TURN_CHARS

    class Runaway(Agent):
        name = "runaway"

        def act(self, requests):
            return ["I propose: " + "hat " * 250_000 for _ in requests]   # a million characters a turn

    (ep,) = play(TASK, {"A": Runaway(), "B": ScriptedAgent("fair", 0)}, TASK.sample_scenarios(1, seed=0), seeds=[0])
    runaway = [t for t in ep.state.turns if t.role == "A"]
    assert runaway and all(len(t.text) <= MAX_TURN_CHARS for t in runaway)
    assert ep.state.info["cut_turns"] == len(runaway)


def test_personas_differ_in_toughness():
    """Against the same counterpart ("fair"), tough personas leave it less and walk away more often than soft ones.
    (Measured on 200 scenarios: counterpart score greedy 5.8 vs fair 7.0, agreement stubborn 0.70 vs conceder 1.00.)"""
    scenarios = TASK.sample_scenarios(200, seed=2)

    def vs_fair(p):
        return TASK.metrics([e.state for e in play(TASK, {"A": ScriptedAgent(p, 1), "B": ScriptedAgent("fair", 2)},
                                                     scenarios)])
    greedy, fair, stubborn, conceder = (vs_fair(p) for p in ("greedy", "fair", "stubborn", "conceder"))
    assert greedy["score_A"] > fair["score_A"] + 0.5 and greedy["score_B"] < fair["score_B"] - 0.5
    assert stubborn["agreement"] < conceder["agreement"] - 0.1 and stubborn["score_B"] < conceder["score_B"] - 0.5


def test_same_seed_same_games():
    scenarios = TASK.sample_scenarios(30, seed=3)

    def run():
        pop_a, pop_b = population("A", seed=1), population("B", seed=2)
        return [e.transcript() for e in play(TASK, {"A": pop_a, "B": pop_b}, scenarios)]
    assert run() == run()


def test_population_draws_each_member_reproducibly():
    pop = population("A", ["greedy", "fair"], weights={"greedy": 3.0, "fair": 1.0}, seed=0)
    eps = play(TASK, {"A": pop, "B": ScriptedAgent("fair", 0)}, TASK.sample_scenarios(400, seed=4))
    picks = [e.agents["A"] for e in eps]
    assert set(picks) == {"greedy", "fair"} and 0.65 < picks.count("greedy") / len(picks) < 0.85
    with pytest.raises(ValueError, match="unknown A persona"):
        population("A", ["nobody"])


def test_corpus_views():
    corpus = dond_corpus(10, seed=0, views="both")
    assert len(corpus) == 20 and all(any(m["role"] == "assistant" for m in c) for c in corpus)
    view_a, view_b = corpus[0], corpus[1]  # the same game from both sides: A's turns are B's counterpart's turns
    assert [m["content"] for m in view_a if m["role"] == "assistant"] == \
        [m["content"] for m in view_b if m["role"] == "user"]
    assert len(dond_corpus(10, seed=0, views="one")) == 10


def test_lm_turns_keep_their_tokens_and_roles(dond_toy):
    model, tok = dond_toy
    agent = LMAgent(model, tok, max_new_tokens=24)
    seed_everything(0)
    eps = play(TASK, {"A": agent, "B": ScriptedAgent("fair", 0)}, TASK.sample_scenarios(8, seed=5))
    for ep in eps:
        for k, turn in enumerate(ep.state.turns):
            assert turn.role == ("A", "B")[k % 2]
            if turn.role == "B":
                assert turn.completion_ids is None and turn.agent == "fair"
                continue
            assert turn.agent == "lm" and len(turn.logprobs) == len(turn.completion_ids) > 0
            assert len(turn.completion_ids) <= 24
            # the prompt is exactly the role's view at that turn through the chat template
            state_then = TASK.reset(ep.scenario)
            state_then.turns = ep.state.turns[:k]
            assert turn.prompt_ids == agent.encode([TASK.view(state_then, "A")])[0]
            stopped = turn.completion_ids[-1] in agent.stop_ids
            assert stopped or len(turn.completion_ids) == 24


@pytest.mark.parametrize("reuse_cache", [True, False])
def test_sampling_logprobs_match_a_fresh_forward_pass(dond_toy, reuse_cache):
    """Every turn of every game, batched with others and (by default) continued from its KV cache, has the
    log-probs that one fresh forward pass over its own prompt + completion gives."""
    model, tok = dond_toy
    agent = LMAgent(model, tok, max_new_tokens=16, temperature=1.0, reuse_cache=reuse_cache)
    seed_everything(1)
    eps = play(TASK, {"A": agent, "B": agent}, TASK.sample_scenarios(6, seed=6))
    n = 0
    for ep in eps:
        for turn in ep.state.turns:
            ids = torch.tensor([turn.prompt_ids + turn.completion_ids])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(turn.prompt_ids) - 1:-1]
            fresh = logits.log_softmax(-1).gather(-1, torch.tensor(turn.completion_ids)[:, None]).squeeze(-1)
            assert torch.allclose(fresh, torch.tensor(turn.logprobs), atol=1e-4)
            n += 1
    assert n > 12 and not agent._cache  # play() released the caches


def test_top_p_and_temperature_logprobs(dond_toy):
    model, tok = dond_toy
    agent = LMAgent(model, tok, temperature=0.7, top_p=0.9)
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    lp = agent.sampling_logprobs(logits)
    p = (logits / 0.7).softmax(-1)[0]
    kept = p[:2] / p[:2].sum() if p[0] < 0.9 else p[:1] / p[:1].sum()  # the smallest head with mass >= 0.9
    assert torch.allclose(lp[0, :len(kept)].exp(), kept, atol=1e-6) and torch.isinf(lp[0, -1])


def test_rollout_is_deterministic_for_a_seed(dond_toy):
    model, tok = dond_toy
    agent = LMAgent(model, tok, max_new_tokens=16)
    scenarios = TASK.sample_scenarios(6, seed=7)

    def run(seed):
        seed_everything(seed)
        return [[t.text for t in e.state.turns] for e in play(TASK, {"A": agent, "B": agent}, scenarios)]
    assert run(3) == run(3)


def test_malformed_model_output_never_crashes_and_is_counted(dond_toy):
    model, tok = dond_toy
    agent = LMAgent(model, tok, max_new_tokens=8)  # truncated turns: many markers are cut off
    seed_everything(2)
    eps = play(TASK, {"A": agent, "B": agent}, TASK.sample_scenarios(16, seed=8))
    states = [e.state for e in eps]
    assert all(s.done and len(s.talk_turns()) <= TASK.max_turns for s in states)
    # the rules, not the engine, decide what is invalid: replaying each game's texts gives the same verdicts
    for s in states:
        again = play_texts(TASK, s.scenario, [t.text for t in s.turns])
        assert [t.invalid for t in again.turns] == [t.invalid for t in s.turns]
    n_invalid = sum(t.invalid is not None for s in states for t in s.turns)
    assert TASK.metrics(states)["invalid_rate"] == pytest.approx(n_invalid / sum(len(s.turns) for s in states))
    for e in eps:  # each invalid turn costs its speaker invalid_penalty
        for role in TASK.roles:
            own = sum(t.invalid is not None for t in e.state.turns if t.role == role)
            assert e.outcome[role]["n_invalid"] == own
            assert e.outcome[role]["reward"] == pytest.approx(e.outcome[role]["score"] - TASK.invalid_penalty * own)


def test_selection_by_likelihood_returns_a_valid_selection(dond_toy):
    model, tok = dond_toy
    task = DealOrNoDeal(protocol="selection", max_turns=2)
    agent = LMAgent(model, tok, max_new_tokens=8)
    seed_everything(0)
    eps = play(task, {"A": agent, "B": agent}, task.sample_scenarios(3, seed=9))
    for ep in eps:
        sel = [t for t in ep.state.turns if t.phase == "select"]
        assert len(sel) == 2 and all(t.invalid is None for t in sel)


def test_selection_by_likelihood_scores_each_candidate_as_if_alone(dond_toy):
    """The candidates are left-padded into one batch; each must score what it scores unpadded (positions count its
    own tokens), so the choice does not depend on the other candidates' lengths."""
    import torch

    from dialogrl.game import ActRequest

    model, tok = dond_toy
    task = DealOrNoDeal(protocol="selection", max_turns=2)
    state = play_texts(task, task.sample_scenarios(1, seed=3)[0], ["i want the books", "ok <selection>"])
    request = ActRequest(task, state, "A", task.view(state, "A"))
    agent = LMAgent(model, tok)
    prompt = agent.encode([request.messages])[0]
    alone = {}
    for c in task.selection_candidates(state):
        done = tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        seq = torch.tensor([prompt + done])
        with torch.no_grad():
            logp = model(input_ids=seq).logits[0, :-1].float().log_softmax(-1)
        alone[c] = sum(logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(done))
    batched = agent.selection_scores(request)
    assert batched == pytest.approx(alone, abs=1e-4)
    assert agent.select(request) == max(alone, key=alone.get)


def test_lm_agents_use_the_tasks_learned_selector(dond_toy):
    """With a selector on the task, the selection turn is the selector's answer for that role, not the LM's."""
    model, tok = dond_toy
    asked = []

    def selector(state, role):
        asked.append(role)
        return "no agreement" if role == "A" else " ".join(f"{i}={n}" for i, n in zip(("book", "hat", "ball"),
                                                                                      state.scenario.counts))
    task = DealOrNoDeal(protocol="selection", max_turns=2, selector=selector)
    eps = play(task, {"A": LMAgent(model, tok, max_new_tokens=8), "B": LMAgent(model, tok, max_new_tokens=8)},
               task.sample_scenarios(3, seed=9))
    assert sorted(asked) == ["A"] * 3 + ["B"] * 3
    for ep in eps:
        sel = {t.role: t.text for t in ep.state.turns if t.phase == "select"}
        assert sel["A"] == "no agreement" and sel["B"].startswith("book=") and not ep.outcome["A"]["agreed"]
    with pytest.raises(ValueError, match="selection protocol"):
        DealOrNoDeal(protocol="offer", selector=selector)


def test_play_needs_an_agent_per_role():
    with pytest.raises(ValueError, match="no agent for role"):
        play(TASK, {"A": ScriptedAgent("fair")}, TASK.sample_scenarios(1, seed=0))


def test_play_names_an_object_that_is_not_an_agent():
    class Duck:  # has act() but does not declare the Agent interface
        name = "duck"

        def act(self, requests):
            return ["[no deal]" for _ in requests]

    with pytest.raises(TypeError, match="role 'B' is a Duck, not an Agent"):
        play(TASK, {"A": ScriptedAgent("fair"), "B": Duck()}, TASK.sample_scenarios(1, seed=0))


def test_role_turns_are_what_one_role_said_game_by_game():
    from dialogrl.envs import persuasion
    from dialogrl.rollout import role_turns

    task = persuasion.PersuasionForGood(max_exchanges=2)
    agents = {"persuader": persuasion.ScriptedAgent("factual"), "persuadee": persuasion.ScriptedAgent("generous")}
    eps = play(task, agents,
               task.sample_scenarios(2, seed=0), seeds=[1, 2])
    said = role_turns(eps, "persuader")
    assert said == [t.text for e in eps for t in e.state.turns if t.role == "persuader"] and said
