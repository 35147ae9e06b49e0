"""Named random streams: every random draw of a run comes from a stream named here, keyed by what it is for.

    stream_seed("eval-games", seed, scenario.id, role, counterpart)   # -> a 63-bit int, the same in every process
    stream_rng("tokens", game_seed, role)                             # -> a random.Random seeded with it
    eval_seeds(seed, scenarios, role, counterpart)                    # -> each evaluation game's seed

A draw keyed by what it is for (this game, this role, this turn) never depends on batch size, order, or what else
ran before it: evaluating 50 games gives the first 50 games of an 80-game evaluation, and two methods evaluated on
the same keys face the same random numbers (common random numbers: the policy's name is never part of a key).

    stream           keys                                  what it draws
    ---------------  ------------------------------------  ----------------------------------------------------------
    train-scenarios  run seed, step                        the scenarios of one training step (`Trainer.scenarios`);
                                                           their ids run on over the steps (step * scenarios_per_step
                                                           + i): no two steps of a run share one
    train-games      run seed, step, index                 the seed of each training dialogue (each dialogue of a
                                                           scenario group its own); `trl_rollout`: (seed, call, index)
    eval-scenarios   seed, ...                             evaluation scenarios, apart from every training draw:
                                                           task.sample_scenarios(n, stream_seed("eval-scenarios", seed))
    eval-games       seed, scenario id, role, counterpart  the seed of each evaluation game (`eval_seeds`: used by
                                                           `evaluate.cross_play`, `evaluate.panel_eval`)
    horizons         seed, H                               the evaluation seed of horizon H
                                                           (`theory.returns_by_horizon`)
    tokens           game seed, role                       an LM's token sampling in one game: one uniform per token,
                                                           from one random.Random per (game, role) for the game's
                                                           lifetime (`LMAgent.rng`, `sampling.sample_categorical`)
    counterpart      game seed                             scripted counterparts' and `Population`'s private draws:
                                                           random.Random(f"{agent seed}/{key}/{role}/{turn}") with
                                                           key = `game.game_key(state, "counterpart")`
    vs               game seed                             Verbalized Sampling's choice among its candidates (the same,
                                                           with key = game_key(state, "vs"))
    decision         game seed                             a calibrated user's decision module's accept / hold-out draw
                                                           (`dealnodeal.AcceptanceModel.decide`: the same, with key =
                                                           game_key(state, "decision"))
    minibatches      run seed, step, adapter, epoch        the trainer's split of a rollout into minibatches
    logs             seed, ...                             synthetic logged dialogues (scripted "human" logs):
                                                           task.sample_scenarios(n, stream_seed("logs", seed))
    check-scenarios  seed, what                            the scenarios of a design check before training
                                                           (`dialogrl.room`: what = "responds" or "room"), apart
                                                           from training and evaluation
    check-games      seed, what, scenario id               the seed of each game of a design check; both kinds of a
                                                           probe, and every reference policy, play the same seeds

A game's seed is set by `rollout.play(task, agents, scenarios, seeds=...)` on its `GameState.seed`; a game without
one (seeds=None) keys its agents' draws on its scenario id and samples tokens from torch's global generator, as
before streams existed (warm-start corpora are built that way, so the embedded models' caches stay valid).
Seeds are `blake2b` hashes of the stream's name and keys (never Python's `hash()`, which is salted per process).
"""
from __future__ import annotations

import hashlib
import json
import operator
import random

STREAMS = ("train-scenarios", "train-games", "eval-scenarios", "eval-games", "horizons", "tokens", "counterpart",
           "vs", "decision", "minibatches", "logs", "check-scenarios", "check-games")


def _key(k) -> int | str:
    if isinstance(k, str):
        return k
    try:
        return operator.index(k)   # int, bool and numpy integers alike
    except TypeError:
        raise TypeError(f"stream key {k!r} ({type(k).__name__}): keys are ints or strings") from None


def stream_seed(stream: str, *keys) -> int:
    """A 63-bit seed for `stream` at `keys` (ints or strings): a stable hash, the same on every machine and process.

    Distinct streams, or distinct keys of one stream, give unrelated seeds. Raises ValueError for a stream that is
    not in STREAMS.
    """
    if stream not in STREAMS:
        raise ValueError(f"unknown random stream {stream!r}; the streams are {', '.join(STREAMS)} (dialogrl.seeds)")
    text = json.dumps([stream, *map(_key, keys)])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1


def stream_rng(stream: str, *keys) -> random.Random:
    """A random.Random seeded with stream_seed(stream, *keys)."""
    return random.Random(stream_seed(stream, *keys))


def eval_seeds(seed: int, scenarios, role: str, counterpart: str) -> list[int]:
    """The seed of each evaluation game on `scenarios`, the policy in `role` against `counterpart` (a name):
    stream_seed("eval-games", seed, scenario id, role, counterpart), the id being the scenario's position where it
    has none. The policy is not part of the key: every method faces the same random numbers."""
    return [stream_seed("eval-games", seed, getattr(sc, "id", k), role, counterpart) for k, sc in enumerate(scenarios)]
