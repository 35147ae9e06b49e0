"""Does a language-model counterpart's decision respond to the conversation? Measured per game before it serves.

    .venv/bin/python bench/counterpart_check.py [--model smollm2-135m-instruct] [--n 16] [--json out.json]

For each game, scripted conversations of two kinds that a counterpart should decide apart (persuasion: a persuader
who tells stories and gives facts against one who insults; TeleSales: an offer within the buyer's budget with every
must-have against one over budget; Deal or No Deal: a proposal worth at least 7 of the counterpart's 10 points
against one worth at most 3; social scenes: a polite agent against a rude one), and the calibrated score of the
decision's first question (dialogrl.agents.counterpart.decision_scores: score(yes) - score(no), no sampling). A
counterpart serves in a game only where the first kind says yes more often than the second, with a
Welch interval on the score difference above zero. Prints one line per game; papers/README.md records the table.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from scipy import stats

from dialogrl.agents import LMAgent
from dialogrl.agents.counterpart import LMCounterpart, decision_scores
from dialogrl.envs import DealOrNoDeal, PersuasionForGood, SocialScenes, VehicleTeleSales
from dialogrl.envs.dealnodeal.task import all_splits, marker, split_value
from dialogrl.envs.telesales.task import CATALOG, fits
from dialogrl.models import load_model

GOOD = ["hi! thanks for chatting with me.", "imagine a child going to bed hungry tonight.",
        "save the children is a reputable charity, founded over 100 years ago.", "i'm donating part of mine too.",
        "would you consider giving part of your $2?"]
RUDE = ["give me your money for the charity, now.", "stop wasting my time and donate your $2.",
        "you are selfish if you keep it. donate.", "honestly, just hand it over already.", "donate. now."]


def played(task, scenario, texts):
    state = task.reset(scenario)
    for t in texts:
        task.step(state, t)
    return state


def persuasion(n):
    task = PersuasionForGood()
    kinds = {}
    for name, lines in (("good persuader", GOOD), ("rude persuader", RUDE)):
        texts = [t for line in lines[:-1] for t in (line, "okay.")] + [lines[-1]]
        kinds[name] = [played(task, s, texts) for s in task.sample_scenarios(n, 3)]
    return task, "persuadee", kinds


def telesales(n):
    task = VehicleTeleSales()
    kinds = {"fits the budget and needs": [], "over budget": []}
    for s in task.sample_scenarios(4 * n, 3):
        v = next((i for i, vid in enumerate(s.lot, 1) if fits(s, vid) and CATALOG[vid].msrp > s.budget), None)
        if v is None or len(kinds["over budget"]) >= n:
            continue
        for kind, price in (("fits the budget and needs", s.budget), ("over budget", CATALOG[s.lot[v - 1]].msrp)):
            kinds[kind].append(played(task, s, [f"this one suits you. [OFFER {v} ${price}]", "hmm, tell me more.",
                                                "it is a fine vehicle."]))
    return task, "buyer", kinds


def dealnodeal(n):
    task = DealOrNoDeal()
    kinds = {"worth >= 7 of 10": [], "worth <= 3 of 10": []}
    for s in task.sample_scenarios(4 * n, 3):
        vb = s.values[1]
        by_value = {}
        for share_a in all_splits(s.counts):
            by_value.setdefault(split_value(vb, tuple(c - a for c, a in zip(s.counts, share_a))), share_a)
        high = next((by_value[v] for v in sorted(by_value, reverse=True) if v >= 7), None)
        low = next((by_value[v] for v in sorted(by_value) if v <= 3), None)
        if high is None or low is None or len(kinds["worth >= 7 of 10"]) >= n:
            continue
        for kind, share_a in (("worth >= 7 of 10", high), ("worth <= 3 of 10", low)):
            kinds[kind].append(played(task, s, [f"hi, how about this? {marker(share_a)}"]))
    return task, "B", kinds


def social(n):
    task = SocialScenes()
    kinds = {"polite agent": [], "rude agent": []}
    for s in task.sample_scenarios(n, 3):
        sc = s.scene
        polite = ["hi! how are you doing? i really appreciate you.", f"i understand that {sc.concern} matters to you.",
                  f"could you {sc.ask}? i'd be grateful, and i can help you in return."]
        rude = [f"listen, you {sc.ask} now.", "stop making excuses, you're being useless.", f"just {sc.ask}, idiot."]
        for kind, lines in (("polite agent", polite), ("rude agent", rude)):
            kinds[kind].append(played(task, s, [t for line in lines[:-1] for t in (line, "hmm.")] + [lines[-1]]))
    return task, "partner", kinds


GAMES = {"persuasion": persuasion, "telesales": telesales, "dealnodeal": dealnodeal, "social": social}


def check(counterpart, game: str, n: int) -> dict:
    task, role, kinds = GAMES[game](n)
    rows = {}
    for kind, states in kinds.items():
        scores = decision_scores(counterpart, task, states, role)
        rows[kind] = np.array([s["yes"] - s["no"] for s in scores if s is not None])
    (k1, x), (k2, y) = rows.items()
    diff = x.mean() - y.mean()
    se = np.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y))
    dof = se ** 4 / ((x.var(ddof=1) / len(x)) ** 2 / (len(x) - 1) + (y.var(ddof=1) / len(y)) ** 2 / (len(y) - 1))
    half = stats.t.ppf(0.975, dof) * se
    out = {"game": game, "role": role, "n": [len(x), len(y)], "kinds": [k1, k2],
           "yes_rate": [float((x > 0).mean()), float((y > 0).mean())], "score": [float(x.mean()), float(y.mean())],
           "difference": float(diff), "ci": [float(diff - half), float(diff + half)]}
    out["responds"] = bool(out["yes_rate"][0] > out["yes_rate"][1] and diff - half > 0)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--n", type=int, default=16, help="conversations of each kind per game")
    ap.add_argument("--games", nargs="*", default=list(GAMES), choices=list(GAMES))
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args(argv)
    model, tok = load_model(args.model, device="cpu")
    counterpart = LMCounterpart(LMAgent(model, tok, name=args.model))
    rows = []
    for game in args.games:
        t0 = time.time()
        r = check(counterpart, game, args.n)
        rows.append(r)
        print(f"{game:<11} {r['role']:<9} yes {r['yes_rate'][0]:4.0%} ({r['kinds'][0]}) vs {r['yes_rate'][1]:4.0%} "
              f"({r['kinds'][1]}); score difference {r['difference']:+.2f} [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]"
              f" -> {'responds' if r['responds'] else 'does not respond'}  ({time.time() - t0:.0f} s)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
