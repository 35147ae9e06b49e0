"""Fuzzing every task's text parsers and whole games: no input raises, every game ends by its turn cap.

Language models write anything, and scripted counterparts read it, so the parsers (Deal or No Deal's offers and
selections, TeleSales' markers and its scripted listener, Persuasion for Good's donations and strategy lexicon)
meet random ASCII and Unicode text, Unicode digit look-alikes, bracket soups, very long inputs and every marker with
broken arguments. Seeded: the same strings on every run.
"""
import random
import re
import string

import pytest

from dialogrl.envs import GAMES, TASKS, dealnodeal, persuasion, social, telesales
from dialogrl.envs.dealnodeal import (
    ITEMS,
    UNSEEN_PERSONAS,
    DealOrNoDeal,
    count_vectors,
    parse_offer,
    parse_selection,
)
from dialogrl.envs.persuasion import LABELS as PERSUASION_LABELS
from dialogrl.envs.persuasion import PersuasionForGood
from dialogrl.envs.persuasion import hear as hear_strategies
from dialogrl.envs.persuasion import parse_marker as parse_donation
from dialogrl.envs.social import ACTS as SOCIAL_ACTS
from dialogrl.envs.social import TRAIN_SCENES, SocialScenes
from dialogrl.envs.social import hear as hear_acts
from dialogrl.envs.social import parse_marker as parse_agreement
from dialogrl.envs.social.judge import RuleJudge
from dialogrl.envs.telesales import (
    CATALOG,
    MAX_PRICE,
    UNSEEN_BUYERS,
    VehicleTeleSales,
    hear,
    parse_marker,
)
from dialogrl.game import Agent, has_cue
from dialogrl.rollout import play

N_STRINGS = 12_000  # per parser (each parser reads every string)

# Characters that str.isdigit() or a Unicode \d accept but int() may not: circled, Arabic-Indic, full-width,
# superscript, mathematical bold, Devanagari, Bengali, NKo digits. Then look-alike brackets and dollars, odd spaces
# (no-break, em, zero-width, right-to-left override) and letters that Unicode case folding maps to ASCII (long s,
# Kelvin sign, dotted capital I).
LOOKALIKES = "\u2460\u2464\u0663\u0665\uff10\uff15\u2075\u00b9\U0001d7d3\U0001d7cf\u0969\u09e9\u07c3"
ODD = "\uff3b\uff3d\u3010\u3011\u3014\u3015\u27e6\u27e7\uff04\u20ac\u00a0\u2003\u200b\u202e\u017f\u212a\u0130\x00\t\n"
UNICODE = LOOKALIKES + ODD + "[]$=,.- " + "\u00e9\u00df\u03b1\u0434\u4e2d\U0001f642"


def number(rng: random.Random, good: int | None = None) -> str:
    """A number field: most of the time `good` (a well-formed value), else anything."""
    if good is not None and rng.random() < 0.7:
        return str(good)
    return rng.choice([
        lambda: str(rng.randint(0, 9)),
        lambda: str(rng.randint(0, 60000)),
        lambda: str(rng.randint(0, 10**12)),
        lambda: "-" + str(rng.randint(1, 40000)),
        lambda: "9" * rng.choice([4300, 4301, 5000]),              # int() refuses more than 4300 digits
        lambda: "".join(rng.choice(LOOKALIKES) for _ in range(rng.randint(1, 5))),
        lambda: str(rng.randint(1, 9)) + rng.choice(LOOKALIKES) + "000",
        lambda: "0" * rng.randint(1, 40) + str(rng.randint(0, 9)),
        lambda: rng.choice(["", "1.5", "1e9", "1e400", "inf", "nan", "0x1f", "+3", " 2", "1_000", "1,000", "1,00",
                            "31.5k", "\u00bd", "one"]),
    ])()


def wrap(rng: random.Random, body: str) -> str:
    """A marker around `body`: usually well bracketed; else unclosed, unopened, nested, doubled or look-alike."""
    return rng.choice([
        lambda: f"[{body}]", lambda: f"[{body}]", lambda: f"ok. [{body}] thanks", lambda: f"[{body.upper()}]",
        lambda: f"[{body}", lambda: f"{body}]", lambda: f"[[{body}]]", lambda: f"[{body}] [{body}]",
        lambda: f"[{body} [accept]]", lambda: f"\uff3b{body}\uff3d", lambda: f"\u3010{body}\u3011",
        lambda: f"[ {body} ]", lambda: f"[{body}]" * rng.randint(2, 5),
    ])()


def mutate_fields(rng: random.Random, fields: list[str]) -> list[str]:
    """Half the time, drop, repeat, swap or add a field."""
    fields = list(fields)
    op = rng.randrange(8)
    if op == 0 and fields:
        fields.pop(rng.randrange(len(fields)))
    elif op == 1 and fields:
        fields.insert(rng.randrange(len(fields) + 1), rng.choice(fields))
    elif op == 2:
        rng.shuffle(fields)
    elif op == 3:
        fields.insert(rng.randrange(len(fields) + 1), rng.choice(["now", "please", "$", "=", "x=1", "[", "]"]))
    return fields


def dond_marker(rng: random.Random) -> str:
    names = [rng.choice([item, item.upper(), f"item{i}", item + "s", "", "\u017f"]) if rng.random() < 0.1 else item
             for i, item in enumerate(ITEMS)]
    fields = [f"{n}{rng.choice(['=', '=', '=', ' = ', ':', ''])}{number(rng, rng.randint(0, 2))}" for n in names]
    kind = rng.choice(["propose", "propose", "propose", "accept", "no deal", "nodeal", "selection", "PROPOSE",
                       "prop\u017fe", "accept now", ""])
    return wrap(rng, " ".join([kind] + mutate_fields(rng, fields)) if kind.lower().startswith("prop") else kind)


def selection_text(rng: random.Random) -> str:
    names = rng.choice([ITEMS, ("item0", "item1", "item2")])
    fields = mutate_fields(rng, [f"{n}={number(rng, rng.randint(0, 2))}" for n in names])
    return rng.choice([
        lambda: " ".join(fields), lambda: " ".join(fields) + " them: " + " ".join(fields),
        lambda: rng.choice(["no agreement", "NO AGREEMENT", "<no_agreement>", "disconnect", "i think we agreed"]),
        lambda: "<selection> " + " ".join(fields) + " <eos>",
    ])()


def telesales_marker(rng: random.Random) -> str:
    kind = rng.choice(["OFFER", "BUY", "offer", "buy", "ACCEPT", "LEAVE", "accept now", "SELL", ""])
    if kind.lower() not in ("offer", "buy"):
        return wrap(rng, kind)
    vehicle = rng.choice([
        lambda: str(rng.randint(1, 6)), lambda: str(rng.randint(0, 99)), lambda: "-1", lambda: number(rng, 1),
        lambda: rng.choice(sorted(CATALOG)), lambda: rng.choice(sorted(CATALOG)).upper(), lambda: "car",
        lambda: "a\u00a0tlas", lambda: "01", lambda: "", lambda: rng.choice(LOOKALIKES),
    ])()
    price = rng.choice(["$", "$", "$ ", "", "$$", "USD ", "\uff04"]) + number(rng, rng.randint(1000, 60000))
    return wrap(rng, " ".join(mutate_fields(rng, [kind, vehicle, price])))


def donation_marker(rng: random.Random) -> str:
    kind = rng.choice(["DONATE", "donate", "Donate", "DONATE ", "GIVE", "donation", ""])
    amount = rng.choice(["$", "$", "$ ", "", "$$", "\uff04"]) + rng.choice([
        lambda: f"{rng.randint(0, 2)}", lambda: f"{rng.uniform(0, 2):.2f}", lambda: f".{rng.randint(0, 99)}",
        lambda: f"{rng.uniform(0, 5):.{rng.randint(0, 4)}f}", lambda: number(rng, 1)])()
    return wrap(rng, " ".join(mutate_fields(rng, [kind, amount])))


def soup(rng: random.Random) -> str:
    parts = ["[", "]", "[", "]", " ", "$", "=", ",", "-", "propose", "accept", "no deal", "offer", "buy", "leave",
             "book=", "hat=", "ball=", "item0=", "<selection>", "k", "."]
    return "".join(rng.choice(parts) if rng.random() < 0.8 else number(rng) for _ in range(rng.randint(1, 40)))


def long_text(rng: random.Random) -> str:
    return rng.choice([
        lambda: "x" * 100_000, lambda: "[" + "9" * 100_000 + "]", lambda: "9" * 100_000,
        lambda: "[propose book=" + "1" * 5000 + " hat=0 ball=0]", lambda: "[OFFER 1 $" + "9" * 5000 + "]",
        lambda: "[OFFER " + "1" * 5000 + " $20000]", lambda: "item0=" + "1" * 5000 + " item1=0 item2=0",
        lambda: "[" * 50_000 + "]" * 50_000, lambda: "$" + "1," * 50_000 + "k",
        lambda: "".join(rng.choice(UNICODE) for _ in range(100_000)),
        lambda: " ".join(dond_marker(rng) + telesales_marker(rng) for _ in range(2000)),
        lambda: "[DONATE $" + "9" * 5000 + "]", lambda: "[DONATE $0." + "5" * 5000 + "]",
    ])()


def fuzz_text(rng: random.Random) -> str:
    """One string of every kind above, drawn with fixed weights (1 in 400 is 10^5 characters long)."""
    if rng.random() < 1 / 400:
        return long_text(rng)
    kind = rng.choices(["ascii", "unicode", "codepoints", "soup", "dond", "selection", "telesales", "donation"],
                       weights=[2, 2, 1, 2, 3, 2, 3, 2])[0]
    if kind == "ascii":
        return "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 80)))
    if kind == "unicode":
        return "".join(rng.choice(UNICODE) for _ in range(rng.randint(0, 40)))
    if kind == "codepoints":  # anywhere in Unicode but the surrogates
        return "".join(chr(rng.choice([rng.randint(0x20, 0xD7FF), rng.randint(0xE000, 0x10FFFF)]))
                       for _ in range(rng.randint(0, 30)))
    return {"soup": soup, "dond": dond_marker, "selection": selection_text, "telesales": telesales_marker,
            "donation": donation_marker}[kind](rng)


@pytest.fixture(scope="module")
def texts():
    rng = random.Random(20240611)
    return [fuzz_text(rng) for _ in range(N_STRINGS)]


def check(result):
    """A parser's output: (action dict with a type, None or a short reason)."""
    action, why = result
    assert isinstance(action, dict) and isinstance(action.get("type"), str)
    assert why is None or (isinstance(why, str) and len(why) < 300)
    return action, why


def test_fuzz_strings_cover_every_kind(texts):
    assert len(texts) >= 10_000
    assert sum(len(t) >= 100_000 for t in texts) >= 10
    assert sum(any(c in t for c in LOOKALIKES) for t in texts) >= 1000
    assert sum("9" * 4301 in t for t in texts) >= 20


def test_dond_offer_parser(texts):
    rng, pools = random.Random(1), count_vectors()
    kinds = set()
    for text in texts:
        counts = rng.choice(pools)
        action, why = check(parse_offer(text, counts))
        kinds.add(action["type"])
        if action["type"] == "propose":
            assert why is None and all(type(s) is int and 0 <= s <= c for s, c in zip(action["share"], counts))
    assert kinds == {"talk", "propose", "accept", "no_deal"}  # the fuzz reaches every action


def test_dond_selection_parser(texts):
    rng, pools = random.Random(2), count_vectors()
    shares = 0
    for text in texts:
        counts = rng.choice(pools)
        action, why = check(parse_selection(text, counts))
        assert action["type"] == "select"
        if action["share"] is not None:
            shares += 1
            assert why is None and all(type(s) is int and 0 <= s <= c for s, c in zip(action["share"], counts))
    assert shares > 100


def test_telesales_marker_parser_and_listener(texts):
    rng, scenarios = random.Random(3), VehicleTeleSales().sample_scenarios(50, seed=4)
    kinds = set()
    for text in texts:
        lot = rng.choice(scenarios).lot
        action, why = check(parse_marker(text, lot))
        kinds.add(action["type"])
        if action["type"] in ("offer", "buy"):
            assert why is None and action["vehicle"] in lot
            assert type(action["price"]) is int and 0 <= action["price"] <= MAX_PRICE
        for clause in hear(text, lot):
            assert all(type(x) is int and 1000 <= x <= MAX_PRICE for x in clause["amounts"])
            assert set(clause["vehicles"]) <= set(lot)
    assert kinds == {"talk", "offer", "buy", "accept", "leave"}


def test_donation_parser_and_strategy_lexicon(texts):
    kinds, amounts = set(), 0
    for text in texts:
        action, why = check(parse_donation(text))
        kinds.add(action["type"])
        if action["type"] == "donate":
            amounts += 1
            assert why is None and type(action["amount"]) is float and 0 <= action["amount"] <= 2
        assert set(hear_strategies(text)) <= set(PERSUASION_LABELS)
    assert kinds == {"talk", "donate"} and amounts > 50


def test_agreement_parser_and_act_lexicon(texts):
    kinds = set()
    scene = TRAIN_SCENES["car"]
    for text in texts:
        action, why = check(parse_agreement(text))
        kinds.add(action["type"])
        assert set(hear_acts(text, scene)) <= set(SOCIAL_ACTS)
    assert "talk" in kinds and kinds <= {"talk", "agree", "refuse"}


def test_cues_match_as_the_word_edge_regex_says():
    """has_cue (the lexicons' matcher) against its definition as a regex, on random text over the cues' letters,
    edges and apostrophes, and on the fuzz strings."""
    rng = random.Random(7)
    cues = ["i know", "heart", "hi", "i'll give", "a"]
    short = ["".join(rng.choice("aihe rtknow'lgv.") for _ in range(rng.randint(0, 30))) for _ in range(20_000)]
    for text in short + [t.lower() for t in texts_sample()]:
        for cue in cues:
            for before, whole in (("", True), ("'", True), ("", False)):
                edge = r"(?![a-z])" if whole else ""
                want = re.search(rf"(?<![a-z{before}])" + re.escape(cue) + edge, text) is not None
                assert has_cue(text, cue, before, whole) == want, (text, cue, before, whole)


def texts_sample(n: int = 300) -> list[str]:
    rng = random.Random(11)
    return [fuzz_text(rng) for _ in range(n)]


def test_lookalike_digits_never_parse_as_numbers():
    counts, lot = (4, 4, 4), VehicleTeleSales().sample_scenarios(1, seed=0)[0].lot
    for d in LOOKALIKES:
        assert parse_offer(f"[propose book={d} hat=0 ball=0]", counts)[0]["type"] == "talk"
        assert parse_selection(f"book={d} hat=0 ball=0", counts)[0]["share"] is None
        assert parse_marker(f"[OFFER {d} $20000]", lot)[0]["type"] == "talk"
        assert parse_marker(f"[OFFER 1 ${d * 5}]", lot)[0]["type"] == "talk"
        assert parse_donation(f"[DONATE ${d}]")[0]["type"] == "talk"


# ------------------------------------------------------------------------------------------------ whole games

class FuzzAgent(Agent):
    """Says a fuzz string every turn; sometimes a marker built from the game (MARKERS). Seeded per (seed, scenario,
    role, turn)."""
    name = "fuzz"

    def __init__(self, seed: int = 0):
        self.seed = seed

    def act(self, requests):
        return [self.say(r) for r in requests]

    def say(self, r) -> str:
        rng = random.Random(f"{self.seed}/{r.state.scenario.id}/{r.role}/{len(r.state.turns)}")
        if rng.random() < 0.01:
            return long_text(rng)
        markers = MARKERS.get(type(r.task))
        if markers is not None and rng.random() < 0.2:
            return markers(rng, r.state)
        return fuzz_text(rng)


def dond_markers(rng: random.Random, state) -> str:
    share = [rng.randint(0, c) for c in state.scenario.counts]
    if state.info.get("phase") == "select":
        return " ".join(f"{i}={n}" for i, n in zip(ITEMS, share))
    return rng.choice(["[accept]", "[propose " + " ".join(f"{i}={n}" for i, n in zip(ITEMS, share)) + "]"])


def telesales_markers(rng: random.Random, state) -> str:
    offers = state.info.get("offers") or [(rng.choice(state.scenario.lot), rng.randint(1000, 60000))]
    v, price = rng.choice(offers)
    return rng.choice([f"[OFFER {v} ${price}]", f"[BUY {v} ${price:,}]", "[ACCEPT]"])


# Markers built from the game (a proposal within the pool, a BUY of a standing offer), so that games also end by a
# deal; a game without an entry hears fuzz strings only
MARKERS = {
    DealOrNoDeal: dond_markers,
    VehicleTeleSales: telesales_markers,
    PersuasionForGood: lambda rng, state: rng.choice(["[DONATE $1]", "[DONATE $0]",
                                                      f"[DONATE ${rng.uniform(0, 3):.2f}]"]),
    SocialScenes: lambda rng, state: rng.choice(["[AGREE]", "[AGREE PARTLY]", "[REFUSE]", "[agree fully]"]),
}


def fuzz_in_every_role(task, game, n_games: int = 60, seed: int = 0) -> set[str]:
    """Whole games of `task` with fuzz strings in every role: fuzz against fuzz, then fuzz in each role against the
    game's scripted population (`game.population(role)`) in the others. Every game ends (by the rules or the turn
    cap), never raises, and has an outcome; the metrics read them all. Returns how the games ended."""
    scenarios = task.sample_scenarios(n_games, seed=seed)
    lineups = [{r: FuzzAgent(seed + i) for i, r in enumerate(task.roles)}]
    lineups += [{q: FuzzAgent(seed + 100 + i) if q == r else game.population(q, seed=seed) for q in task.roles}
                for i, r in enumerate(task.roles)]
    ends = set()
    for agents in lineups:
        episodes = play(task, agents, scenarios)
        assert all(e.state.done for e in episodes)
        cap = getattr(task, "max_turns", None)
        assert cap is None or all(len(e.state.talk_turns()) <= cap for e in episodes)
        assert all(set(task.outcome(e.state)) == set(task.roles) for e in episodes)
        task.metrics([e.state for e in episodes])
        ends |= {e.state.end_reason for e in episodes}
    return ends


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_registered_game_survives_fuzz_in_every_role(name):
    """Every game of the registry (a new game's folder included, with no change here), at its default settings."""
    ends = fuzz_in_every_role(TASKS[name](), GAMES[name])
    assert ends and None not in ends


def finished(task, episodes, cap: int):
    """Every game is over, within `cap` turns, with an outcome and metrics."""
    assert episodes and all(e.state.done for e in episodes)
    assert all(len(e.state.talk_turns()) <= task.max_turns and len(e.state.turns) <= cap for e in episodes)
    task.metrics([e.state for e in episodes])
    return {e.state.end_reason for e in episodes}


@pytest.mark.parametrize("max_turns", [3, 10])
def test_dond_offer_games_with_fuzz_in_every_role(max_turns):
    task = DealOrNoDeal(protocol="offer", max_turns=max_turns)
    scenarios = task.sample_scenarios(150, seed=max_turns)
    ends = set()
    for agents in [{"A": FuzzAgent(1), "B": FuzzAgent(2)},
                   {"A": FuzzAgent(3), "B": dealnodeal.population("B", seed=4)},
                   {"A": dealnodeal.population("A", seed=5), "B": FuzzAgent(6)},
                   {"A": dealnodeal.population("A", list(UNSEEN_PERSONAS), seed=5), "B": FuzzAgent(6)}]:
        ends |= finished(task, play(task, agents, scenarios), cap=max_turns)
    assert ends <= {"accept", "no_deal", "turn_cap"} and "accept" in ends and "turn_cap" in ends


@pytest.mark.parametrize("max_turns", [3, 10])
def test_dond_selection_games_with_fuzz_in_every_role(max_turns):
    task = DealOrNoDeal(protocol="selection", max_turns=max_turns)
    episodes = play(task, {"A": FuzzAgent(7), "B": FuzzAgent(8)}, task.sample_scenarios(200, seed=max_turns))
    finished(task, episodes, cap=max_turns + 2)  # the talk ends by the cap, then each role states a selection
    assert all(set(e.state.info["selections"]) == {"A", "B"} for e in episodes)


@pytest.mark.parametrize("max_turns", [2, 10])
def test_telesales_games_with_fuzz_in_every_role(max_turns):
    task = VehicleTeleSales(max_turns=max_turns)
    scenarios = task.sample_scenarios(150, seed=max_turns)
    buyers = telesales.population("buyer", None, seed=9)
    ends = set()
    for agents in [{"seller": FuzzAgent(10), "buyer": FuzzAgent(11)},
                   {"seller": FuzzAgent(12), "buyer": telesales.ScriptedAgent(None, seed=13)},
                   {"seller": FuzzAgent(14), "buyer": buyers},
                   {"seller": FuzzAgent(15), "buyer": telesales.population("buyer", list(UNSEEN_BUYERS), seed=16)},
                   {"seller": telesales.population("seller", seed=17), "buyer": FuzzAgent(18)}]:
        ends |= finished(task, play(task, agents, scenarios), cap=max_turns)
    assert ends <= {"buy", "leave", "turn_cap"} and "buy" in ends and "turn_cap" in ends


def test_one_marker_frames_the_markers_of_every_game():
    from dialogrl.game import one_marker

    assert one_marker("hello there") == (None, None)
    assert one_marker("ok [accept] then") == ("accept", None)
    assert one_marker("[a] and [b]") == (None, "2 markers in one turn")
    assert one_marker("[accept") == (None, "malformed marker (unbalanced brackets)")
    assert one_marker("[propose book=①]")[1].endswith("(not ASCII)")


@pytest.mark.parametrize("max_exchanges", [1, 5])
def test_persuasion_games_with_fuzz_in_every_role(max_exchanges):
    task = PersuasionForGood(max_exchanges=max_exchanges)
    scenarios = task.sample_scenarios(150, seed=max_exchanges)
    ends = set()
    for agents in [{"persuader": FuzzAgent(20), "persuadee": FuzzAgent(21)},
                   {"persuader": FuzzAgent(22), "persuadee": persuasion.ScriptedAgent(None, seed=23)},
                   {"persuader": FuzzAgent(24), "persuadee": persuasion.population("persuadee", ["reluctant",
                                                                                                 "contrarian",
                                                                                                 "attentive"])},
                   {"persuader": persuasion.population("persuader", seed=25), "persuadee": FuzzAgent(26)}]:
        ends |= finished(task, play(task, agents, scenarios), cap=2 * max_exchanges)
    assert ends == {"donate", "turn_cap"}


@pytest.mark.parametrize("max_exchanges", [1, 5])
def test_social_games_with_fuzz_in_every_role_and_the_judge_reads_them(max_exchanges):
    task = SocialScenes(max_exchanges=max_exchanges)
    scenarios = task.sample_scenarios(150, seed=max_exchanges)
    ends, judge = set(), RuleJudge()
    for agents in [{"agent": FuzzAgent(30), "partner": FuzzAgent(31)},
                   {"agent": FuzzAgent(32), "partner": social.ScriptedAgent(None, seed=33)},
                   {"agent": FuzzAgent(34), "partner": social.population("partner", ["proud", "easygoing", "literal"])},
                   {"agent": social.population("agent", seed=35), "partner": FuzzAgent(36)}]:
        episodes = play(task, agents, scenarios)
        ends |= finished(task, episodes, cap=2 * max_exchanges + 1)
        for e in episodes:
            for j in judge.judge(task, e.state):
                assert all(0.0 <= v <= 1.0 for v in j.scores().values())
    assert ends == {"agree", "turn_cap"}
