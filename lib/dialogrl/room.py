"""What a design needs before anything trains: counterparts that respond, and room to learn (papers/PROTOCOL.md,
"Counterparts that respond, and room tests").

    rec = responsiveness(task, buyer, telesales.probe("buyer"), n=100, seed=0)   # does its decision read the talk?
    rec["responds"]                                                             # diff >= RESPONSE_GAP, CI above 0
    room = room_test(task, "seller", buyer, references, base_seller, n=100)       # how far can the trained role go?
    room["ceiling"], room["passed"]                                             # the check's attainable ceiling

**Responsiveness.** A counterpart *responds* when its decision after a good and a bad conversation of the same game
(a `Probe` of the game: a seller offering what the buyer needs within its budget, or not; a persuader who tells
stories and gives facts, or a rude one) differs by at least RESPONSE_GAP, the gap fixed here before any counterpart
was measured (0.3), with the paired interval's lower end above zero. Both kinds play the same scenarios with the same
game seeds (common random numbers: the counterpart's draws are the same in both), at the temperature the counterpart
is given, so the difference is the conversation's alone; the interval is a t-interval over the paired games (the
counterpart is one fixed agent here, not a training run). Where the counterpart's decision is what the trained
policy is scored on, one that does not respond leaves nothing to learn (`require_responsive` stops such a run
before training); where a paper means the counterpart to be exploitable, its record says so and nothing is refused.

**Room.** The check of a trained method (`claims.check_record`) asks for a quarter of the room between the base and
what is *attainable* against the same counterpart: the best of some reference policies that see only what the
trained role sees (the game's scripted strategies; an oracle that reads private information would overstate the
room). `room_test` plays the base and each reference against the counterpart on the same scenarios and game seeds,
and passes when the best reference's gain over the base has its interval's lower end at or above the check's
threshold (ROOM_SHARE of that gain): some reference demonstrably reaches what a trained method must. A design whose
test fails is refused before training (`require_room`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dialogrl.claims import ROOM_SHARE
from dialogrl.game import Agent, Probe, Task
from dialogrl.rollout import play_cells
from dialogrl.run import save_design_checks, show
from dialogrl.seeds import stream_seed
from dialogrl.stats import t_interval

RESPONSE_GAP = 0.3   # a counterpart responds when its decision rate differs by at least this between the kinds
LIVE_GAMES = 256     # games a room test plays at once (the others wait their turn; seeded games play the same): every
#                      seed's rooms at once, 29 seeds x 16 policies x 40 games, held 16 GB and climbing (notebook 04's
#                      rooms at 8 seeds: 5.3 GB at 1,024 at once, 3.7 GB at 256, and faster, 80 s against 95)


def check_scenarios(task: Task, n: int, seed: int, what: str, applies=None, max_draws: int = 20) -> list:
    """n scenarios for a design check (`what`: "responds" or "room"), from the stream apart from training and
    evaluation, keeping those `applies` accepts (all by default); ids are positions in the draw."""
    if n < 2:
        raise ValueError(f"n={n}: a design check needs at least 2 games")
    drawn = task.sample_scenarios(n * max_draws if applies else n, seed=stream_seed("check-scenarios", seed, what))
    kept = [sc for sc in drawn if applies is None or applies(sc)][:n]
    if len(kept) < n:
        raise ValueError(f"only {len(kept)} of {len(drawn)} drawn scenarios of {task.name!r} suit the check "
                         f"{what!r}; {n} were asked for")
    return kept


def _seeds(seed: int, what: str, scenarios: Sequence) -> list[int]:
    return [stream_seed("check-games", seed, what, getattr(sc, "id", i)) for i, sc in enumerate(scenarios)]


def responsiveness(task: Task, counterpart: Agent, probe: Probe, n: int = 100, seed: int = 0,
                   gap: float = RESPONSE_GAP) -> dict:
    """Does `counterpart` (playing `probe.role` as given: its model, adapter and temperature) decide differently after
    the probe's good and bad conversations? n paired games (the same scenarios and game seeds for both kinds).

    Returns {"role", "decision", "kinds", "good", "bad" (its decision rates), "diff", "ci" (t over the paired
    games), "gap", "games", "responds"}: responds iff diff >= gap and the interval's lower end is above zero.
    """
    scenarios = check_scenarios(task, n, seed, "responds", probe.applies)
    seeds = _seeds(seed, "responds", scenarios)
    other = task.other(probe.role)
    kinds = {"good": probe.good, "bad": probe.bad}   # both kinds at once: the counterpart's games in one batch
    played = play_cells(task, [({probe.role: counterpart, other: agent}, scenarios, seeds) for agent in kinds.values()])
    rates = {kind: np.array([float(e.outcome[probe.role][probe.decision]) for e in episodes])
             for kind, episodes in zip(kinds, played)}
    d = rates["good"] - rates["bad"]
    lo, hi = t_interval(d) if d.std() > 0 else (float(d.mean()), float(d.mean()))
    diff = float(d.mean())
    return {"role": probe.role, "decision": probe.decision, "kinds": list(probe.kinds),
            "good": float(rates["good"].mean()), "bad": float(rates["bad"].mean()), "diff": diff, "ci": [lo, hi],
            "gap": float(gap), "games": int(n), "responds": bool(diff >= gap and lo > 0)}


def require_responsive(records: Mapping[str, dict], what: str = "training counterpart") -> None:
    """Raise ValueError naming every counterpart of `records` ({name: responsiveness record}) that does not respond:
    the training counterparts whose decision the trained policy is scored on (nothing to learn from them)."""
    bad = {name: r for name, r in records.items() if not r["responds"]}
    if bad:
        lines = "; ".join(f"{name}: {r['decision']} {r['good']:.2f} after {r['kinds'][0]} vs {r['bad']:.2f} after "
                          f"{r['kinds'][1]} (difference {r['diff']:+.2f} [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}], "
                          f"needs {r['gap']:.2f})" for name, r in bad.items())
        raise ValueError(f"the {what} does not respond to the conversation, so a policy has nothing to learn from "
                         f"it: {lines}. Use a counterpart that responds (papers/PROTOCOL.md, 'Counterparts that "
                         "respond, and room tests') or a design whose claims do not rest on its decision")


def room_test(task: Task, role: str, counterpart: Agent | Sequence[Agent], references: Mapping[str, Agent],
              base: Agent | Sequence[Agent], n: int = 100, seed: int = 0, metric: str = "reward",
              share: float = ROOM_SHARE) -> dict:
    """How far can `role`'s training objective (`metric` of its outcome) move against `counterpart`? The base and
    each reference policy (seeing only what `role` sees) play it on the same n scenarios and game seeds. With one
    counterpart per training seed (a sequence, each with its own base: the warm-start builds of a notebook), each
    pair plays n scenarios of its own and the games are pooled.

    Returns {"metric", "base", "references": {name: {"mean", "gain", "ci"}}, "reference" (the best), "ceiling"
    (its mean: the attainable ceiling), "room" (ceiling - base), "share", "threshold" (share x room), "games",
    "passed"}: passed iff the best reference's gain over the base has its interval (a t-interval over the paired
    games) at or above the threshold, and the room is positive.
    """
    if not references:
        raise ValueError("room_test needs at least one reference policy")
    counterparts = [counterpart] if isinstance(counterpart, Agent) else list(counterpart)
    bases = [base] if isinstance(base, Agent) else list(base)
    if len(bases) != len(counterparts):
        raise ValueError(f"room_test: {len(counterparts)} counterparts but {len(bases)} bases (one per counterpart)")
    other = task.other(role)
    names, cells = [], []   # every (counterpart, policy) pair at once: each agent's games in one batch
    for k, (opponent, own_base) in enumerate(zip(counterparts, bases)):
        what = "room" if len(counterparts) == 1 else f"room/{k}"
        scenarios = check_scenarios(task, n, seed, what)
        seeds = _seeds(seed, what, scenarios)
        for name, policy in {"base": own_base, **references}.items():
            names.append(name)
            cells.append(({role: policy, other: opponent}, scenarios, seeds))
    scores: dict[str, list[float]] = {name: [] for name in ("base", *references)}
    for name, episodes in zip(names, play_cells(task, cells, max_live=LIVE_GAMES)):
        scores[name] += [float(e.outcome[role][metric]) for e in episodes]
    return room_record(scores, metric, share)


def room_record(scores: Mapping[str, Sequence[float]], metric: str, share: float = ROOM_SHARE) -> dict:
    """`room_test`'s record from the scores of "base" and each reference on the same games, in the same order (a
    notebook whose objective is not a game's outcome, e.g. a reward model's score in logged contexts, scores them
    itself)."""
    base_scores = np.asarray(scores["base"], dtype=float)
    rows = {}
    for name in [n for n in scores if n != "base"]:
        d = np.asarray(scores[name], dtype=float) - base_scores
        lo, hi = t_interval(d) if d.std() > 0 else (float(d.mean()), float(d.mean()))
        rows[name] = {"mean": float(np.mean(scores[name])), "gain": float(d.mean()), "ci": [lo, hi]}
    if not rows:
        raise ValueError("room_record needs at least one reference besides 'base'")
    best = max(rows, key=lambda name: rows[name]["mean"])
    base_mean = float(base_scores.mean())
    room = rows[best]["mean"] - base_mean
    threshold = share * room
    return {"metric": metric, "base": base_mean, "references": rows, "reference": best,
            "ceiling": rows[best]["mean"], "room": room, "share": share, "threshold": threshold,
            "games": int(len(base_scores)), "passed": bool(room > 0 and rows[best]["ci"][0] >= threshold)}


def ceiling(rooms: Mapping[str, dict], name: str, nominal: float) -> dict:
    """The ceiling of a manipulation check of training against `name` (`claims.method_check`'s ceiling and
    reference): its room test's attainable ceiling and the reference that reached it, or the nominal ceiling (no
    reference) where `rooms` has no room test of `name`."""
    r = rooms.get(name)
    return {"ceiling": r["ceiling"], "reference": r["reference"]} if r else {"ceiling": nominal, "reference": None}


def require_room(records: Mapping[str, dict]) -> None:
    """Raise ValueError naming every room test of `records` ({name: room_test record}) that failed: no reference
    policy demonstrably reaches the check's threshold, so a trained method's check could not be passed."""
    bad = {name: r for name, r in records.items() if not r["passed"]}
    if bad:
        lines = "; ".join(f"{name}: the best reference, {r['reference']}, reaches {r['ceiling']:.3f} against the "
                          f"base's {r['base']:.3f} ({r['metric']}; its gain's interval "
                          f"[{r['references'][r['reference']]['ci'][0]:+.3f}, "
                          f"{r['references'][r['reference']]['ci'][1]:+.3f}], the threshold {r['threshold']:.3f})"
                          for name, r in bad.items())
        raise ValueError(f"no room to learn: {lines}. The design is refused before training (papers/PROTOCOL.md, "
                         "'Counterparts that respond, and room tests')")


def replace_unresponsive(check: Callable[[int], dict[str, dict]], rebuild: Callable[[int, int], None],
                         build_seeds: list[int], seeds: Sequence[int], replace: int) -> tuple[dict, list[dict]]:
    """Each training seed's counterparts checked (`check(k)`: {name: `responsiveness` record}); a seed whose
    counterparts do not all respond gets the next unused build seed (`build_seeds[k]` set, `rebuild(k, build_seed)`
    makes its warm start and counterparts anew) and is checked again, at most `replace` times in all. Returns every
    seed's last records, and the replacements ({"seed", "build_seed" replaced, "counterparts": its records})."""
    records, replaced = {}, []
    for k in seeds:
        checks = check(k)
        while len(replaced) < replace and not all(r["responds"] for r in checks.values()):
            replaced.append({"seed": k, "build_seed": build_seeds[k], "counterparts": checks})
            build_seeds[k] = max(build_seeds) + 1
            print(f"seed {k}: warm start build {replaced[-1]['build_seed']}'s counterparts do not respond; replaced "
                  f"by build {build_seeds[k]}")
            rebuild(k, build_seeds[k])
            checks = check(k)
        records.update(checks)
    return records, replaced


def show_counterparts(records: Mapping[str, dict], question: str) -> None:
    """Counterparts' responsiveness records as one table, captioned `question`."""
    import pandas as pd

    show(pd.DataFrame(records).T[["good", "bad", "diff", "ci", "responds"]].style.set_caption(question))


def show_rooms(rooms: Mapping[str, dict], what: str = "the policy's training reward against {name}",
               top: int | None = None) -> None:
    """Each room test's references, best first (`top` of them), captioned `what` (with the room's name for {name}),
    its base and its ceiling."""
    import pandas as pd

    for name, room in rooms.items():
        refs = pd.DataFrame(room["references"]).T
        refs = refs.sort_values("mean", ascending=False).head(top) if top else refs
        show(refs.style.set_caption(f"{what.format(name=name)} (base {room['base']:.3f}); the best reference, "
                                    f"{room['reference']}, is the checks' attainable ceiling"))


def show_design_checks(run_dir, counterparts: Mapping[str, dict], rooms: Mapping[str, dict], question: str,
                       top: int | None = None, what: str = "the policy's training reward against {name}",
                       **more) -> None:
    """A notebook's design checks, shown and kept: the counterparts' responsiveness (`show_counterparts`), the room
    tests (`show_rooms`), then design_checks.json (`run.save_design_checks`, with `more`), written before a design
    can be refused."""
    show_counterparts(counterparts, question)
    show_rooms(rooms, what, top)
    save_design_checks(run_dir, counterparts, rooms, **more)


def responsive_panel(records: Mapping[str, dict], heldout: Sequence[str], mode: str = "responsive",
                     what: str = "held-out counterpart") -> list[str]:
    """The held-out counterparts a notebook's pooled claims read (`claims_panel`): with mode "responsive" those of
    `heldout` whose responsiveness records respond (one checked in several roles, keys `<name>@<role>`, in each),
    with "all" every one (the summary says which). A ValueError when none is left: nothing to judge methods by."""
    if mode == "all":
        return list(heldout)
    panel = [c for c in heldout if all(r["responds"] for key, r in records.items() if key.split("@")[0] == c)]
    if not panel:
        raise ValueError(f"no {what} responds ({list(heldout)}): nothing to judge the methods against; "
                         "claims_panel='all' reads them all (and says so)")
    return panel
