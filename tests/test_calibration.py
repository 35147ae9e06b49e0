"""Simulator calibration: behaviour statistics by hand, the distance, the human-turn NLL, and that SFT and DPO
calibration move the simulator toward the 'human' data (on the toy model, seconds)."""
import math
from pathlib import Path

import pytest

from conftest import make_toy_corpus, play_texts
from dialogrl.agents import LMAgent
from dialogrl.calibration import (
    acceptance_curve,
    behaviour_distance,
    calibrate_dpo,
    calibrate_sft,
    decision_distance,
    distance_change,
    preference_pairs,
    role_conversations,
    turn_nll,
)
from dialogrl.claims import intervention
from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import (
    BEHAVIOUR_SCALES,
    DECISION_BINS,
    AcceptanceModel,
    DecidingUser,
    DondScenario,
    behaviour_stats,
    complement,
    compliance,
    decision_conversations,
    population,
    split_value,
)
from dialogrl.envs.dealnodeal import decisions as dealnodeal_decisions
from dialogrl.envs.dealnodeal import probe as dealnodeal_probe
from dialogrl.envs.dealnodeal.acceptance import NOTES, accepted, answer_points
from dialogrl.game import Agent, StreamingAgent, Utterance
from dialogrl.models import load_model
from dialogrl.rollout import play
from dialogrl.room import require_responsive, responsiveness
from dialogrl.tokens import assistant_tokens

SC = DondScenario(counts=(1, 2, 3), values=((4, 0, 2), (2, 4, 0)))  # A: book 4, ball 2; B: book 2, hat 4


def test_behaviour_stats_by_hand():
    task = DealOrNoDeal()
    g1 = play_texts(task, SC, ["[propose book=1 hat=0 ball=3]",   # A opens at 4 + 6 = 10
                               "no [propose book=1 hat=2 ball=0]",  # B opens at 2 + 8 = 10 (answers A: no accept)
                               "[propose book=1 hat=0 ball=2]",     # A concedes 10 -> 8
                               "ok [accept]"])                      # B accepts A's standing proposal
    g2 = play_texts(task, SC, ["hello there", "[accept]",            # B: accept with nothing standing (invalid)
                               "[no deal]"])
    a, b = behaviour_stats(task, [g1, g2], "A"), behaviour_stats(task, [g1, g2], "B")
    assert a["opening_demand"] == 10 and a["concession"] == 2
    assert a["acceptance_rate"] == 0.0  # A answered B's proposal once, with a counter-proposal
    assert b["acceptance_rate"] == 0.5 and b["opening_demand"] == 10 and math.isnan(b["concession"])
    assert a["turns"] == b["turns"] == 3.5 and a["agreement"] == b["agreement"] == 0.5
    assert a["words_per_turn"] == 3.0 and b["words_per_turn"] == pytest.approx(8 / 3)  # markers count as words
    d = behaviour_distance(a, b, BEHAVIOUR_SCALES)
    assert "concession" not in d  # NaN on one side: left out
    assert d["acceptance_rate"] == 0.5 and d["opening_demand"] == d["turns"] == d["agreement"] == 0.0
    assert d["words_per_turn"] == pytest.approx(1 / 30) and d["total"] == pytest.approx((0.5 + 1 / 30) / 5)


def test_role_conversations_are_the_roles_views():
    task = DealOrNoDeal()
    g = play_texts(task, SC, ["hi [propose book=1 hat=0 ball=3]", "ok [accept]"])
    conv = role_conversations(task, [g, task.reset(SC)], "B")
    assert len(conv) == 1 and conv[0][-1] == {"role": "assistant", "content": "ok [accept]"}
    assert "book" in conv[0][0]["content"] and conv[0][0]["role"] == "system"


def shifted(n, seed):
    """A 'human' population that answers the toy model's question in another style."""
    return make_toy_corpus(n, seed, answer="i see {k}, all {colour}.")


def test_sft_calibration_lowers_the_human_turn_nll(toy_model_dir, tmp_path):
    train, held_out = shifted(300, 0), shifted(60, 1)
    model, tok = load_model(str(toy_model_dir), device="cpu")
    before = turn_nll(model, tok, held_out)
    assert math.isfinite(before) and before > 0
    sim = calibrate_sft(toy_model_dir, train, tmp_path / "sim", epochs=2, lr=3e-3, seed=0)
    model2, tok2 = load_model(str(sim), device="cpu")
    after = turn_nll(model2, tok2, held_out)
    assert after < 0.5 * before, (before, after)
    assert (sim / "calibration.json").exists()


def test_dpo_prefers_the_human_turn(toy_model_dir, tmp_path):
    model, tok = load_model(str(toy_model_dir), device="cpu")
    simulator = LMAgent(model, tok, max_new_tokens=12)
    pairs = preference_pairs(shifted(64, 2), simulator)
    assert pairs and all(p.prompt[-1]["role"] == "user" and p.chosen.startswith("i see") for p in pairs)
    held_out = shifted(40, 3)
    before = turn_nll(model, tok, held_out)
    out = calibrate_dpo(toy_model_dir, pairs, tmp_path / "dpo", beta=0.1, lr=2e-3, epochs=3, batch_size=16)
    model2, tok2 = load_model(str(out), device="cpu")
    assert turn_nll(model2, tok2, held_out) < before  # the human style became more likely


# The chat templates of the hub models a gpu profile may name, as the hub ships them (TRL keeps byte-exact copies,
# offline), and SmolLM2's ChatML without the markers dialogrl.packaged adds: none marks the assistant's tokens.
HUB_TEMPLATES = ["qwen2_5", "qwen3", "llama3", "llama3_1", "llama3_2", "gemma", "gemma3", "phi3", "smollm2"]
TALK = [{"role": "user", "content": "how many red balls? there are 3."},
        {"role": "assistant", "content": "3 red balls."},
        {"role": "user", "content": "and blue? there are 4."},
        {"role": "assistant", "content": "4 blue balls."}]


def hub_template(name: str) -> str:
    if name == "smollm2":
        from dialogrl.packaged import CHATML_GENERATION

        return CHATML_GENERATION.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text()


@pytest.fixture(scope="module")
def hub_tok(toy_model_dir):
    """The toy model's tokenizer, to be given a hub model's chat template (with a bos token, which Llama's use)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(toy_model_dir))
    tok.bos_token = tok.eos_token
    return tok


@pytest.mark.parametrize("name", HUB_TEMPLATES)
def test_the_assistant_tokens_of_a_hub_template(hub_tok, name):
    """turn_nll scores exactly the assistant's messages on the hub's own templates, which have no {% generation %}
    markers: the text each message adds after the generation prompt (Qwen3's: TRL's training version, which adds the
    empty thinking block to every turn)."""
    hub_tok.chat_template = hub_template(name)
    ids, mask = assistant_tokens(hub_tok, TALK)
    said = hub_tok.decode([i for i, m in zip(ids, mask) if m])
    assert "3 red balls." in said and "4 blue balls." in said
    assert "how many" not in said and "and blue" not in said and "user" not in said
    assert len(ids) == len(mask) and 0 < sum(mask) < len(mask)
    if name != "qwen3":   # what the model writes after the generation prompt, not the prompt's newline
        assert said.startswith("3 red balls.")


def test_turn_nll_on_a_hub_template_and_the_template_it_cannot_read(toy_model_dir, hub_tok):
    from dialogrl.packaged import CHATML_GENERATION

    model, _ = load_model(str(toy_model_dir), device="cpu")
    hub_tok.chat_template = CHATML_GENERATION         # SmolLM2's template as dialogrl.packaged marks it
    marked = turn_nll(model, hub_tok, [TALK])
    hub_tok.chat_template = hub_template("smollm2")   # the same text, without the markers
    assert turn_nll(model, hub_tok, [TALK]) == pytest.approx(marked)
    hub_tok.chat_template = ("{% for m in messages | reverse %}{{ m['role'] + ': ' + m['content'] + '\\n' }}"
                             "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
    with pytest.raises(ValueError, match="TRL knows no training version"):
        turn_nll(model, hub_tok, [TALK])


def test_sft_calibration_on_a_template_trl_cannot_patch(toy_model_dir, hub_tok, tmp_path):
    """SmolLM2's own ChatML has no markers and TRL no training version of it: calibrate_sft trains on the tokens and
    the assistant mask of assistant_tokens, and lowers the human-turn NLL as on the marked template."""
    import shutil

    src = tmp_path / "unmarked"
    shutil.copytree(toy_model_dir, src)
    hub_tok.chat_template = hub_template("smollm2")
    hub_tok.save_pretrained(src)
    model, tok = load_model(str(src), device="cpu")
    held_out = shifted(60, 1)
    before = turn_nll(model, tok, held_out)
    sim = calibrate_sft(src, shifted(120, 0), tmp_path / "sim", epochs=2, lr=3e-3, seed=0)
    model2, tok2 = load_model(str(sim), device="cpu")
    assert tok2.chat_template == hub_template("smollm2")   # the user's template, not a patched one
    assert turn_nll(model2, tok2, held_out) < 0.5 * before


# ------------------------------------------------------------------------------ the decisions that decide the game

def test_the_users_view_marks_what_each_proposal_gives_it():
    """notes=("B",): B's view carries the worth to B of each valid proposal of A; A's view and the bare task's none."""
    task, bare = DealOrNoDeal(notes=("B",)), DealOrNoDeal()
    g = play_texts(task, SC, ["hi [propose book=1 hat=0 ball=3]",   # leaves B 2 hats: 8 of its 10 points
                              "no [propose book=1 hat=2 ball=0]",
                              "[propose book=9 hat=0 ball=0]",      # beyond the pool: invalid, no note
                              "[propose book=0 hat=1 ball=3]"])
    b = [m["content"] for m in task.view(g, "B") if m["role"] == "user"]
    assert b == ["hi [propose book=1 hat=0 ball=3]\n(to you: 8 of your 10 points)", "[propose book=9 hat=0 ball=0]"]
    assert not any("to you" in m["content"] for m in task.view(g, "A") + bare.view(g, "B"))
    assert task.note(g, 3, "A") == "" and task.note(g, 1, "A") == ""   # A is not noted, and reads no notes
    with pytest.raises(ValueError, match="notes"):
        DealOrNoDeal(notes=("C",))
    with pytest.raises(ValueError, match="offer protocol"):
        DealOrNoDeal(protocol="selection", notes=("B",))


def test_decisions_by_hand_in_both_protocols():
    task = DealOrNoDeal()
    g1 = play_texts(task, SC, ["[propose book=1 hat=2 ball=3]",   # leaves B nothing: 0 points
                               "no [propose book=1 hat=2 ball=0]",  # B answers (rejects 0) and proposes
                               "ok",                                 # A talks: B's proposal stands, A's does not
                               "[propose book=1 hat=1 ball=0]",      # B proposes again: no decision of B
                               "[propose book=0 hat=0 ball=3]",      # leaves B a book and 2 hats: 10 points
                               "[accept]"])                          # B accepts 10
    g2 = play_texts(task, SC, ["[propose book=1 hat=1 ball=3]", "[accpt]"])   # B answers 4 with an invalid turn
    assert dealnodeal_decisions(task, [g1, g2], "B") == [(0, False), (10, True), (4, False)]
    assert dealnodeal_decisions(task, [g1], "A") == [(6, False), (6, False)]   # A's answers: B's standing offer
    sel = DealOrNoDeal(protocol="selection")
    agreed = play_texts(sel, SC, ["i take the balls", "ok <selection>", "book=0 hat=0 ball=3", "book=1 hat=2 ball=0"])
    split = play_texts(sel, SC, ["hi", "<selection>", "book=1 hat=0 ball=3", "book=1 hat=2 ball=0"])
    nothing = play_texts(sel, SC, ["hi", "<selection>", "no agreement", "book=1 hat=2 ball=0"])
    assert dealnodeal_decisions(sel, [agreed, split, nothing], "B") == [(10, True), (8, False)]


def test_acceptance_curve_and_decision_distance_by_hand():
    bins = ((0, 1), (2, 5), (6, 10))
    human = acceptance_curve([(0, False), (1, False), (3, False), (4, True), (7, True), (9, True), (10, True),
                              (11, True)], bins)   # 11 is in no bin
    assert [(r["bin"], r["n"], r["accepted"]) for r in human] == [("0-1", 2, 0.0), ("2-5", 2, 0.5), ("6-10", 3, 1.0)]
    flat = acceptance_curve([(w, True) for w in range(11)], bins)   # accepts everything
    assert decision_distance(flat, human) == pytest.approx((2 * 1.0 + 2 * 0.5 + 3 * 0.0) / 7)
    assert decision_distance(human, human) == 0.0
    sparse = acceptance_curve([(0, True)], bins)   # one bin only: the others are left out of the weights
    assert decision_distance(sparse, human) == 1.0
    assert math.isnan(decision_distance(acceptance_curve([], bins), human))
    with pytest.raises(ValueError, match="other bins"):
        decision_distance(acceptance_curve([], bins[:2]), human)


def test_distance_change_is_a_t_interval_over_seeds():
    """Known per-seed distances: the differences -0.2, -0.25, -0.15 have mean -0.2, sd 0.05 and the t-interval
    -0.2 +- t(0.975, 2) * 0.05 / sqrt(3), below zero; -0.2, -0.3, -0.1 (sd 0.1) give one that reaches above it."""
    c = distance_change([0.5, 0.55, 0.45], [0.3, 0.3, 0.3])
    half = 4.302652729911275 * 0.05 / math.sqrt(3)
    assert c["per_seed"] == pytest.approx([-0.2, -0.25, -0.15]) and c["diff"] == pytest.approx(-0.2)
    assert c["ci"] == pytest.approx([-0.2 - half, -0.2 + half]) and c["seeds"] == 3 and c["happened"]
    wide = distance_change([0.5, 0.6, 0.4], [0.3, 0.3, 0.3])
    assert wide["diff"] == pytest.approx(-0.2) and wide["ci"][1] > 0 and wide["happened"] is False
    assert distance_change([0.5], [0.3])["happened"] is None                          # one seed: no interval
    assert distance_change([0.5, float("nan")], [0.3, 0.2])["happened"] is None
    with pytest.raises(ValueError, match="one per seed"):
        distance_change([0.5, 0.6], [0.3])


class AcceptsAll(Agent):
    """A simulated user that accepts whatever stands and opens with a fixed proposal: it reads no offer."""
    name = "accepts-all"

    def act(self, requests):
        return ["ok [accept]" if r.state.info.get("offer") else "[propose book=1 hat=1 ball=1]" for r in requests]


class FollowsTheHumans(Agent):
    """A simulated user that accepts a proposal worth at least 6 of its points, as the logged humans below do."""
    name = "follows"

    def act(self, requests):
        out = []
        for r in requests:
            offer, values = r.state.info.get("offer"), r.state.scenario.values[1]
            worth = offer and split_value(values, complement(r.state.scenario.counts, offer[1]))
            out.append("ok [accept]" if offer and offer[0] == "A" and worth >= 6 else "no, not enough for me")
        return out


def test_a_calibration_that_leaves_the_decision_curve_flat_fails_the_intervention_check():
    """Humans who accept good proposals only; per seed an uncalibrated and a 'calibrated' simulator that both accept
    everything: the decision distance does not fall, so the intervention did not happen. A simulator that decides as
    the humans do passes the same check."""
    task = DealOrNoDeal(notes=("B",))
    humans = population("A", ["fair", "greedy"], seed=1)
    human_curve = acceptance_curve([(w, w >= 6) for w in range(11) for _ in range(5)], DECISION_BINS)

    def distance(sim, k):
        scenarios = task.sample_scenarios(40, seed=100 + k)
        states = [e.state for e in play(task, {"A": humans, "B": sim}, scenarios)]
        return decision_distance(acceptance_curve(dealnodeal_decisions(task, states, "B"), DECISION_BINS),
                                 human_curve)

    flat = [distance(AcceptsAll(), k) for k in range(3)]
    assert min(flat) > 0.2
    same = distance_change(flat, [distance(AcceptsAll(), k) for k in range(3)])
    check = intervention("decision distance, calibrated minus uncalibrated", same["diff"], below=0.0, ci=same["ci"])
    assert same["happened"] is False and check["happened"] is False
    moved = distance_change(flat, [distance(FollowsTheHumans(), k) for k in range(3)])
    check = intervention("decision distance, calibrated minus uncalibrated", moved["diff"], below=0.0, ci=moved["ci"])
    assert moved["happened"] and check["happened"] and moved["ci"][1] < 0


def test_a_calibrated_simulator_that_accepts_everything_stops_calibrated_rl():
    """Notebook 01's design check (refuse_design): every seed's calibrated simulator must respond to what a
    proposal gives it, else the run stops before training, naming the seed and its numbers."""
    task, probe_b = DealOrNoDeal(notes=("B",)), dealnodeal_probe("B")
    records = {f"calibrated simulator of seed {k}": responsiveness(task, sim, probe_b, n=20, seed=0)
               for k, sim in enumerate([FollowsTheHumans(), AcceptsAll()])}
    assert records["calibrated simulator of seed 0"]["responds"]
    with pytest.raises(ValueError, match=r"calibrated simulator .*seed 1: agreed 1\.00 after .* vs 1\.00"):
        require_responsive(records, "calibrated simulator (calibrated RL trains against it)")
    require_responsive({k: r for k, r in records.items() if "seed 0" in k})   # raises nothing


# ------------------------------------------------------------- a decision module beside the calibrated user's talk

class Eager(StreamingAgent):
    """A stand-in for the calibrated user's language model that accepts whatever stands, marks or not."""
    name = "eager"

    def __init__(self):
        self._done = []

    def submit(self, requests):
        self._done += [(r, Utterance("ok deal [accept]" if r.state.info.get("offer") else "hi")) for r in requests]

    def busy(self):
        return bool(self._done)

    def advance(self):
        done, self._done = self._done, []
        return done


def human_games(n, seed=0):
    task = DealOrNoDeal()
    humans = {r: population(r, ["greedy", "fair", "stubborn", "accommodating"], seed=seed, style="casual")
              for r in task.roles}
    return task, [e.state for e in play(task, humans, task.sample_scenarios(n, seed=seed))]


def test_answer_points_and_the_decisions_marked_in_the_users_view():
    task = DealOrNoDeal()
    g = play_texts(task, SC, ["[propose book=1 hat=2 ball=3]",   # 0: leaves B nothing
                              "no [propose book=1 hat=2 ball=0]",  # 1: B holds out (and proposes)
                              "ok",                                 # 2: A talks: B's proposal stands, no point
                              "hmm",                                # 3
                              "[propose book=0 hat=0 ball=3]",      # 4: leaves B 10
                              "[accept]"])                          # 5: B accepts
    assert answer_points(task, g, "B") == [(0, 0), (4, 10)] and answer_points(task, g, "A") == [(1, 6), (3, 6)]
    assert [accepted(g, i) for i in (0, 4)] == [False, True] and accepted(g, 5) is None
    (conv,) = decision_conversations(task, [g], "B")
    users = [m["content"] for m in conv if m["role"] == "user"]
    assert users == [f"[propose book=1 hat=2 ball=3]\n{NOTES[False]}", "ok", f"[propose book=0 hat=0 ball=3]\n"
                     f"{NOTES[True]}"]
    assert not any("(you " in m["content"] for m in task.view(g, "B") + decision_conversations(task, [g], "A")[0]
                   if m["role"] == "assistant")


def test_the_acceptance_model_learns_that_humans_accept_what_gives_them_more():
    task, games = human_games(400)
    model = AcceptanceModel(seed=0).fit(task, games, "B")
    p = model.prob([1, 5, 9], [3, 3, 3], task.max_turns)
    assert p[0] < 0.1 < p[2] and p[0] < p[1] < p[2] and model.n_decisions > 400
    late = model.prob([5], [task.max_turns - 1], task.max_turns)[0]
    assert late > p[1]   # the personas concede as the talk runs out
    with pytest.raises(ValueError, match="20 or more"):
        AcceptanceModel().fit(task, games[:2], "B")
    with pytest.raises(ValueError, match="offer protocol"):
        AcceptanceModel().fit(DealOrNoDeal(protocol="selection"), games, "B")


def test_a_deciding_user_decides_as_its_module_the_same_in_any_batch():
    """The module decides, the talk cannot overrule it: wrapped around a model that accepts everything, the user
    accepts what gives it more (the module's curve), in the logged humans' own words, strikes the model's other
    acceptances out (counted), and plays each game the same alone or among others."""
    task, logs = human_games(400)
    model = AcceptanceModel(seed=3).fit(task, logs, "B")
    assert model.phrases and all(p.endswith("[accept]") for p in model.phrases)
    user = DecidingUser(Eager(), model, name="calibrated")
    buyers = population("A", ["greedy", "fair"], seed=1)
    scenarios = task.sample_scenarios(120, seed=9)
    seeds = list(range(1000, 1120))
    states = [e.state for e in play(task, {"A": buyers, "B": user}, scenarios, seeds=seeds)]
    done = compliance(model, task, states, "B")
    assert done["rate"] == done["accepted_when_told"] == done["held_when_told"] == 1.0 and done["decisions"] > 120
    assert user.stats["overruled"] > 0 and user.stats["accepted"] == sum(s.end_reason == "accept" and s.turns[-1].role
                                                                         == "B" for s in states)
    assert all(s.turns[-1].text in model.phrases for s in states if s.end_reason == "accept" and
               s.turns[-1].role == "B")
    curve = acceptance_curve(dealnodeal_decisions(task, states, "B"), DECISION_BINS)
    assert curve[0]["accepted"] < 0.1 < curve[-1]["accepted"]
    alone = play(task, {"A": buyers, "B": user}, scenarios[7:8], seeds=seeds[7:8])[0].state
    assert [t.text for t in alone.turns] == [t.text for t in states[7].turns]
    eager = [e.state for e in play(task, {"A": buyers, "B": AcceptsAll()}, scenarios, seeds=seeds)]
    assert compliance(model, task, eager, "B")["held_when_told"] < 0.5   # a user that ignores the module is caught


def test_calibration_record_means_over_seeds_and_the_change_per_seed():
    """calibration.calibration_record: each measure's mean with its t-interval over the seeds, the calibrated minus
    uncalibrated distance per seed, and nll_uncalibrated None where the uncalibrated simulator had no likelihood."""
    import pandas as pd

    from dialogrl.calibration import calibration_record, distance_change

    rows = pd.DataFrame({"seed": [0, 1, 2], "nll_calibrated": [1.0, 2.0, 3.0],
                         "decision_distance_uncalibrated": [0.5, 0.6, 0.7],
                         "decision_distance_calibrated": [0.2, 0.2, 0.4],
                         "behaviour_distance_uncalibrated": [1.0, 1.0, 1.0],
                         "behaviour_distance_calibrated": [0.9, 1.1, 1.0]})
    rec = calibration_record(rows)
    assert rec["nll_calibrated"] == 2.0 and len(rec["nll_calibrated_ci"]) == 2 and rec["nll_uncalibrated"] is None
    assert rec["decision_change"] == distance_change([0.5, 0.6, 0.7], [0.2, 0.2, 0.4])
    assert rec["decision_change"]["happened"] and not rec["behaviour_change"]["happened"]
