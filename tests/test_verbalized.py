"""Verbalized Sampling: the prompt layout, the parser (malformed JSON, wrong k, bad probabilities), the wrapper's
retries, fallbacks, counts and draws, and the VS examples of the persuasion corpus. Fast: no model is built (the
wrapper runs over a stand-in with LMAgent's `generate` that replays fixed answers)."""
import random
from collections import Counter

import pytest

from dialogrl.agents import VerbalizedSampling
from dialogrl.envs.persuasion import PersuasionForGood, PersuasionScenario, ScriptedAgent
from dialogrl.envs.persuasion.corpus import persona_replies, persuasion_corpus
from dialogrl.game import ActRequest, Utterance
from dialogrl.rollout import play
from dialogrl.seeds import stream_seed
from dialogrl.verbalized import parse_vs, vs_answer, vs_messages

TASK = PersuasionForGood()
GOOD = vs_answer([("yes", 0.5), ("no", 0.2), ("maybe", 0.1), ("later", 0.1), ("why?", 0.1)])


def test_prompt_layout():
    msgs = [{"role": "system", "content": "You are a worker."}, {"role": "user", "content": "You speak first."},
            {"role": "assistant", "content": "hello"}, {"role": "user", "content": "would you donate?"}]
    vs = vs_messages(msgs, 5, speaker="You", counterpart="Persuader")
    assert [m["role"] for m in vs] == ["system", "user"]
    assert vs[0]["content"].startswith("You are a worker. Give 5 different replies") and '"probability"' in \
        vs[0]["content"]
    assert "Persuader: You speak first.\nYou: hello\nPersuader: would you donate?" in vs[1]["content"]


def test_parse_good_answers_and_answers_inside_text():
    cands, problem = parse_vs(GOOD, 5)
    assert problem is None and [t for t, _ in cands] == ["yes", "no", "maybe", "later", "why?"]
    assert sum(p for _, p in cands) == pytest.approx(1)
    assert parse_vs("Sure! " + GOOD + " hope that helps", 5)[0] == cands
    assert parse_vs(vs_answer([("a", 1.0)]), 1) == ([("a", 1.0)], None)


@pytest.mark.parametrize("text, problem", [
    ("", "not JSON"), ("hello there", "not JSON"), ('{"responses": [', "not JSON"), ("[1, 2]", "not JSON"),
    ('{"responses": "yes"}', "no responses list"), ('{"answers": []}', "no responses list"),
    ('{"responses": ["yes", "no"]}', "no responses list"),
    (vs_answer([("a", 0.5), ("b", 0.5)]), "k=2, asked for 5"),
    (vs_answer([("a", 0.2)] * 6), "k=6, asked for 5"),
    (vs_answer([("a", 0.2)] * 4 + [(" ", 0.2)]), "an empty reply"),
    ('{"responses": [' + ", ".join(['{"text": "a", "probability": "high"}'] * 5) + "]}", "not a number"),
    ('{"responses": [' + ", ".join(['{"text": "a", "probability": 1.5}'] * 5) + "]}", "not a number"),
    ('{"responses": [' + ", ".join(['{"text": "a", "probability": true}'] * 5) + "]}", "not a number"),
    ('{"responses": [' + ", ".join(['{"text": "a", "probability": NaN}'] * 5) + "]}", "not a number"),
    ('{"responses": [' + ", ".join(['{"text": "a"}'] * 5) + "]}", "not a number"),
    (vs_answer([("a", 0.0)] * 5), "sum to 0"),
])
def test_unusable_answers_are_named(text, problem):
    cands, why = parse_vs(text, 5)
    assert cands is None and problem in why


def test_probabilities_off_one_are_renormalised_and_counted():
    cands, problem = parse_vs(vs_answer([("a", 0.6), ("b", 0.6), ("c", 0.3), ("d", 0.3), ("e", 0.2)]), 5)
    assert problem == "probabilities sum to 2.00" and sum(p for _, p in cands) == pytest.approx(1)
    assert cands[0][1] == pytest.approx(0.3)
    within = '{"responses": [' + ", ".join(['{"text": "a", "probability": 0.205}'] * 5) + "]}"
    assert parse_vs(within, 5)[1] is None   # 1.025: within the tolerance


def test_parser_never_raises():
    rng = random.Random(0)
    pieces = ['{', '}', '[', ']', '"responses"', '"text"', '"probability"', ':', ',', '0.2', '"a"', '1e999', 'null',
              "\\u00e9", '"', ' ']
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        cands, why = parse_vs(text, rng.randint(1, 5))
        assert cands is not None or why
    assert parse_vs("{" * 100_000 + "}" * 100_000, 5)[0] is None   # deep nesting: an unusable answer, not an error


class ReplayLM:
    """A streaming LMAgent (`submit`, `busy`, `advance`, and `rng`, the game's token stream) over fixed answers, in
    order (a stand-in to test the wrapper's own logic); it records each submission's size and token streams."""
    name = "replay"

    def __init__(self, answers):
        self.answers, self.calls, self.rngs, self.queue = list(answers), [], [], []

    def rng(self, state, role):
        return None if state.seed is None else ("tokens", state.seed, role)

    def submit(self, requests):
        self.calls.append(len(requests))
        self.rngs.append([self.rng(r.state, r.role) for r in requests])
        self.queue += requests

    def busy(self):
        return bool(self.queue)

    def advance(self):
        done, self.queue = [(r, Utterance(self.answers.pop(0))) for r in self.queue], []
        return done

    def clear_cache(self, finished_only=False):
        pass


def request(scenario_id=0, turns=1):
    state = TASK.reset(PersuasionScenario("analytical", 0.0, id=scenario_id))
    for _ in range(turns):
        TASK.step(state, "hello")
    return ActRequest(TASK, state, "persuadee", TASK.view(state, "persuadee"))


def test_wrapper_retries_then_falls_back_and_counts():
    vs = VerbalizedSampling(ReplayLM(["oops", "bad", GOOD, "still bad", "no"]), k=5, retries=2)
    out = vs.act([request(0, 1), request(1, 1)])
    assert out[0] in {"yes", "no", "maybe", "later", "why?"}   # the second attempt parsed
    assert out[1] == "no"                                         # three unusable answers: the raw text
    assert vs.lm.calls == [2, 2, 1]
    assert vs.stats["turns"] == 2 and vs.stats["attempts"] == 5 and vs.stats["fallbacks"] == 1
    assert vs.stats["problems"] == {"not JSON": 4} and vs.fallback_rate == 0.5
    from dialogrl.verbalized import problem_kind
    assert [problem_kind(p) for p in ("k=2, asked for 5", "probabilities sum to 1.40", "probabilities sum to 0",
                                      "a probability that is not a number in [0, 1]")] == \
        ["wrong k", "probabilities off 1", "probabilities sum to 0", "a probability that is not a number in [0, 1]"]
    vs.reset_stats()
    assert vs.stats["turns"] == 0


def test_random_mode_is_uniform_and_prob_mode_follows_the_probabilities():
    skewed = vs_answer([("a", 0.8), ("b", 0.05), ("c", 0.05), ("d", 0.05), ("e", 0.05)])
    n = 2000
    for mode, share in (("random", 0.2), ("prob", 0.8)):
        vs = VerbalizedSampling(ReplayLM([]), k=5, mode=mode)
        picks = Counter(vs.choose(parse_vs(skewed, 5)[0], request(i)) for i in range(n))
        assert picks["a"] / n == pytest.approx(share, abs=0.04), mode
    vs = VerbalizedSampling(ReplayLM([]), k=5)
    r = request(3, 1)
    assert len({vs.choose(parse_vs(skewed, 5)[0], r) for _ in range(20)}) == 1   # reproducible per game and turn


def test_the_dialogues_of_one_group_draw_their_candidates_independently():
    """A training group plays one scenario several times, each game with its own seed: VS draws its candidate per
    game (and samples each game's tokens from that game's stream); without seeds every game of a scenario draws the
    same index, turn after turn (the old behaviour, kept for seedless games)."""
    cands = parse_vs(GOOD, 5)[0]
    vs = VerbalizedSampling(ReplayLM([GOOD] * 8), k=5)

    def group(seeds):
        requests = [request(0, 1) for _ in seeds]
        for r, s in zip(requests, seeds):
            r.state.seed = s
        return requests
    seeds = [stream_seed("train-games", 0, 0, j) for j in range(40)]
    assert len({vs.choose(cands, r) for r in group(seeds)}) == 5
    assert len({vs.choose(cands, r) for r in group([None] * 40)}) == 1
    assert vs.act(group(seeds[:8])) and vs.lm.rngs[-1] == [("tokens", s, "persuadee") for s in seeds[:8]]


def test_bad_wrapper_parameters_are_named():
    with pytest.raises(ValueError, match="mode='best'"):
        VerbalizedSampling(ReplayLM([]), mode="best")
    with pytest.raises(ValueError, match="k=0"):
        VerbalizedSampling(ReplayLM([]), k=0)
    with pytest.raises(ValueError, match="retries=-1"):
        VerbalizedSampling(ReplayLM([]), retries=-1)


def test_wrapper_plays_whole_games():
    answers = [vs_answer([("fine. [DONATE $1]", 0.5)] + [(f"hmm {i}", 0.125) for i in range(4)])] * 400
    vs = VerbalizedSampling(ReplayLM(answers), k=5, mode="prob")
    eps = play(TASK, {"persuader": ScriptedAgent("balanced"), "persuadee": vs}, TASK.sample_scenarios(40, seed=1))
    m = TASK.metrics([e.state for e in eps])
    assert m["invalid_rate"] == 0 and 0.5 < m["success"] <= 1 and vs.stats["fallbacks"] == 0


def test_corpus_writes_vs_examples_from_the_persona_distribution():
    corpus = persuasion_corpus(n_dialogues=200, seed=2, vs_share=0.5)
    vs = [c for c in corpus if c[-2]["content"].endswith("Your candidate replies:")]
    persuadee = [c for c in corpus if "You are a worker" in c[0]["content"]]
    assert 0.3 * len(persuadee) < len(vs) < 0.7 * len(persuadee) and len(corpus) == 200
    for c in vs:
        cands, problem = parse_vs(c[-1]["content"], 5)
        assert problem is None and len({t for t, _ in cands}) == 5
    assert persuasion_corpus(n_dialogues=40, seed=2, vs_share=0.5) == persuasion_corpus(n_dialogues=40, seed=2,
                                                                                         vs_share=0.5)
    with pytest.raises(ValueError, match="vs_share"):
        persuasion_corpus(n_dialogues=2, vs_share=1.5)
    state = TASK.reset(TASK.sample_scenarios(1, seed=0)[0])
    TASK.step(state, "imagine a hungry child. would you donate some of your payment?")
    replies = persona_replies(TASK, state, 5)
    assert sum(p for _, p in replies) == pytest.approx(1) and len(replies) == 5


def test_pooled_stats_average_the_rates_and_sum_the_problems():
    from dialogrl.verbalized import pooled_stats

    stats = [{"turns": 10, "attempts": 14, "fallbacks": 1, "renormalised": 0, "problems": {"not JSON": 4}},
             {"turns": 5, "attempts": 5, "fallbacks": 0, "renormalised": 1, "problems": {"too few": 1, "not JSON": 2}},
             {"turns": 0, "attempts": 0, "fallbacks": 0, "renormalised": 0, "problems": {}}]
    out = pooled_stats(stats)
    assert out["fallback_rate"] == pytest.approx((0.1 + 0 + 0) / 3)
    assert out["attempts_per_turn"] == pytest.approx((1.4 + 1.0 + 0) / 3)
    assert out["problems"] == {"not JSON": 6, "too few": 1} and list(out["problems"]) == ["not JSON", "too few"]
