"""Agents: anything that writes the next utterance for a batch of games.

    agent.act(requests) -> list[str]        one utterance per request (a game whose turn it is, and the role)

`ScriptedAgent` plays a rule-based persona: it proposes, concedes and accepts by explicit rules over its own private
values and the public history, and speaks through a small template language with varied phrasing. Scripted
personas are the held-out counterparts and the synthetic "human" population. `Population` is a weighted set of
agents, one drawn per game. `LMAgent` wraps a causal LM (optionally one LoRA adapter of it).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from dialogrl.envs.base import GameState, Task
from dialogrl.envs.dealnodeal import (ITEMS, DealOrNoDeal, all_splits, complement, describe, marker, split_value)


@dataclass
class ActRequest:
    """A game waiting for `role` to speak. `messages` is the role's chat view (what an LM sees)."""
    task: Task
    state: GameState
    role: str
    messages: list[dict]


@dataclass
class Utterance:
    """What a language-model agent said, with the exact tokens (see Turn for the fields' meaning)."""
    text: str
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None


class Agent:
    name: str = "agent"

    def act(self, requests: Sequence[ActRequest]) -> list[str | Utterance]:
        """One utterance per request, in order (a plain string, or an Utterance with its tokens)."""
        raise NotImplementedError


# --------------------------------------------------------------------------------------- Deal or No Deal personas

@dataclass(frozen=True)
class Persona:
    """An aspiration-based negotiator (Faratin-style time-dependent concession).

    Its aspiration (the share of its maximum value, 10, that it demands) falls from `start` to `end` over the talk
    as a(p) = start - (start - end) * p ** beta, p = talk progress in [0, 1]: beta > 1 concedes late (Boulware),
    beta < 1 early (conceder). It accepts a standing proposal worth at least 10 * a(p) - `margin`, and on its last
    turn anything worth its reservation 10 * `end`. Its own proposals demand at least 10 * a(p) and, among those,
    give the partner what the partner seems to want most (items the partner asked for). `noise` is the chance of
    an erratic move; `talk` the chance of a line of cheap talk about its preferences.
    """
    name: str
    start: float
    end: float
    beta: float = 1.0
    margin: float = 0.0
    noise: float = 0.0
    talk: float = 0.3
    style: str = "plain"  # phrasing: "plain" or "casual"


PERSONAS: dict[str, Persona] = {p.name: p for p in [
    Persona("greedy", start=1.0, end=0.6, beta=2.0),
    Persona("fair", start=0.6, end=0.5, beta=1.0, margin=0.5),
    Persona("stubborn", start=0.9, end=0.7, beta=4.0),
    Persona("accommodating", start=0.7, end=0.3, beta=0.5, margin=1.0),
    Persona("erratic", start=0.8, end=0.4, beta=1.0, noise=0.3),
    Persona("boulware", start=1.0, end=0.5, beta=6.0, talk=0.1),
    Persona("conceder", start=0.8, end=0.2, beta=0.3, margin=0.5, talk=0.5),
]}
# Personas that no part of the pipeline has seen: the warm-start corpus (`dond_corpus`) and the default populations
# draw from PERSONAS only, so these are held out from the warm start as well as from RL. Parameters unlike any above.
UNSEEN_PERSONAS: dict[str, Persona] = {p.name: p for p in [
    Persona("haggler", start=0.85, end=0.45, beta=2.5, margin=0.3, noise=0.1, talk=0.4),
]}
ALL_PERSONAS: dict[str, Persona] = {**PERSONAS, **UNSEEN_PERSONAS}

_PHRASES = {
    "plain": {
        "propose": ["i would like {own}.", "how about i take {own} and you take {other}?",
                    "i need {own}.", "let me have {own}, and {other} is yours.", "give me {own}.",
                    "you can have {other} if i get {own}."],
        "counter": ["no, that's not enough for me.", "i can't do that.", "that gives you too much.", ""],
        "accept": ["deal.", "ok, that works for me.", "sounds good.", "fine, agreed."],
        "no_deal": ["i can't make that work.", "we won't agree, sorry."],
        "like": ["i really want the {item}s.", "the {item}s matter most to me.", "i'd love the {item}s."],
        "dislike": ["i don't care much for the {item}s.", "you can have the {item}s."],
    },
    "casual": {
        "propose": ["can i get {own}?", "ok so {own} for me, {other} for u",
                    "what if i get {own}", "i'll take {own}, rest is yours"],
        "counter": ["nah", "hmm no", "no way", "that doesn't work for me", ""],
        "accept": ["ok deal", "deal!", "sure", "alright fine"],
        "no_deal": ["forget it", "no deal then"],
        "like": ["i need the {item}s", "{item}s pls"],
        "dislike": ["don't need the {item}s", "{item}s are yours"],
    },
}


def aspiration(p: Persona, progress: float) -> float:
    """a(p) = start - (start - end) * progress ** beta, in [0, 1]."""
    return p.start - (p.start - p.end) * min(max(progress, 0.0), 1.0) ** p.beta


class ScriptedAgent(Agent):
    """A scripted Deal or No Deal negotiator playing one Persona (offer protocol; a name from PERSONAS or
    UNSEEN_PERSONAS). Each utterance draws from its own RNG, seeded by (seed, scenario, role, turn): a game plays
    the same whatever else is in the batch and however many games the agent played before (no state between
    evaluation cells)."""

    def __init__(self, persona: Persona | str, seed: int = 0):
        if isinstance(persona, str) and persona not in ALL_PERSONAS:
            raise ValueError(f"unknown persona {persona!r}; personas: {', '.join(ALL_PERSONAS)}")
        self.persona = ALL_PERSONAS[persona] if isinstance(persona, str) else persona
        self.name = self.persona.name
        self.seed = seed

    def act(self, requests: Sequence[ActRequest]) -> list[str]:
        return [self.utter(r.task, r.state, r.role) for r in requests]

    def utter(self, task: DealOrNoDeal, state: GameState, role: str) -> str:
        if state.info.get("phase") == "select":
            raise ValueError("scripted personas play the offer protocol only")
        p = self.persona
        # the scenario's content, not only its id: training steps reuse ids 0..n-1 for new scenarios
        rng = random.Random(f"{self.seed}/{state.scenario!r}/{role}/{len(state.turns)}")
        counts, values = state.scenario.counts, state.scenario.values[task.roles.index(role)]
        n = len(state.talk_turns())
        last_chance = n >= task.max_turns - 2   # the partner may not get to answer a proposal after this one
        a = aspiration(p, n / max(task.max_turns - 1, 1))
        standing = state.info.get("offer")
        offered = None
        if standing is not None and standing[0] != role:
            offered = split_value(values, complement(counts, standing[1]))
        phrases = _PHRASES[p.style]

        if p.noise and rng.random() < p.noise:  # erratic: a random proposal, or a snap acceptance
            if offered is not None and rng.random() < 0.3:
                return f"{rng.choice(phrases['accept'])} [accept]"
            share = rng.choice(all_splits(counts))
            return self._propose(rng, share, counts, phrases)
        if offered is not None and (offered >= 10 * a - p.margin or (last_chance and offered >= 10 * p.end)):
            return f"{rng.choice(phrases['accept'])} [accept]"
        if n >= task.max_turns - 1 and offered is not None and offered < 10 * p.end:
            return f"{rng.choice(phrases['no_deal'])} [no deal]"
        share = self._choose_share(rng, counts, values, a, state, role)
        talk = ""
        if p.talk and rng.random() < p.talk:  # cheap talk about its own preferences
            order = sorted(range(3), key=lambda i: values[i])
            kind, i = ("like", order[-1]) if rng.random() < 0.6 else ("dislike", order[0])
            talk = rng.choice(phrases[kind]).format(item=ITEMS[i])
        return self._propose(rng, share, counts, phrases, reject=offered is not None, talk=talk)

    @staticmethod
    def _propose(rng: random.Random, share, counts, phrases, reject: bool = False, talk: str = "") -> str:
        body = rng.choice(phrases["propose"]).format(own=describe(share), other=describe(complement(counts, share)))
        parts = [rng.choice(phrases["counter"]) if reject else "", body, talk]
        return " ".join(x for x in parts if x) + " " + marker(share)

    @staticmethod
    def _choose_share(rng: random.Random, counts, values, a: float, state: GameState, role: str) -> tuple:
        """Among shares worth >= 10*a to me, the one the partner seems to value most (its asks weigh items)."""
        want = [1.0, 1.0, 1.0]
        for t in state.talk_turns():  # the partner's proposals show what it wants
            if t.role != role and t.action and t.action.get("type") == "propose" and t.invalid is None:
                want = [w + s / c for w, s, c in zip(want, t.action["share"], counts)]
        splits = all_splits(counts)
        ok = [s for s in splits if split_value(values, s) >= 10 * a - 1e-9]
        if not ok:
            ok = [max(splits, key=lambda s: split_value(values, s))]

        def key(s):
            partner = sum(w * x for w, x in zip(want, complement(counts, s)))
            return (partner, -split_value(values, s), rng.random())
        return max(ok, key=key)


@dataclass
class Population(Agent):
    """A weighted set of agents; each game draws one member (by its scenario id and the seed) for all its turns."""
    members: dict[str, Agent]
    weights: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    name: str = "population"

    def pick(self, state: GameState, role: str) -> str:
        """The member that plays `role` in this game: drawn once per game, reproducibly from (seed, scenario, role)."""
        picks = state.info.setdefault("population", {})
        if role not in picks:
            names = sorted(self.members)
            rng = random.Random(f"{self.seed}/{getattr(state.scenario, 'id', 0)}/{role}")
            picks[role] = rng.choices(names, weights=[self.weights.get(n, 1.0) for n in names])[0]
        return picks[role]

    def act(self, requests: Sequence[ActRequest]) -> list:
        out: list = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(self.pick(r.state, r.role), []).append(i)
        for name, idx in groups.items():
            for i, text in zip(idx, self.members[name].act([requests[i] for i in idx])):
                out[i] = text
        return out


def persona_population(names: Sequence[str] | None = None, weights: dict[str, float] | None = None,
                       seed: int = 0, style: str | None = None) -> Population:
    """A Population of scripted personas (all of PERSONAS by default; UNSEEN_PERSONAS by name), optionally all
    speaking in `style`."""
    names = list(names or PERSONAS)
    unknown = [n for n in names if n not in ALL_PERSONAS]
    if unknown:
        raise ValueError(f"unknown persona(s) {unknown}; personas: {', '.join(ALL_PERSONAS)}")
    members = {}
    for i, n in enumerate(names):
        p = ALL_PERSONAS[n] if style is None else Persona(**{**ALL_PERSONAS[n].__dict__, "style": style})
        members[n] = ScriptedAgent(p, seed=seed * 1000 + i)
    return Population(members, dict(weights or {}), seed=seed)


# ------------------------------------------------------------------------------------------ language-model agents

class LMAgent(Agent):
    """A causal LM (optionally one named LoRA adapter of it) that speaks from its chat view.

    Turns are sampled with continuous batching (dialogrl.sampling.DecodeBatch): the rollout engine `submit`s a
    turn whenever a game needs one and `advance`s the running batch one token at a time, so a game's next turn joins
    as soon as its previous one ends (stop at the end-of-turn token, at most `max_new_tokens` per turn); with
    `reuse_cache` each game continues from its KV cache of the role's previous turn. `act(requests)` does the same
    for one batch. Each Utterance keeps the prompt ids the role saw, the sampled completion ids and their
    log-probs under the sampling distribution (after temperature and top-p).
    In a selection phase (Deal or No Deal, `selection` protocol) the agent does not decode: it uses the task's
    learned `selector` when it has one, else (with `select_by_likelihood`) it scores every valid split of the pool
    and 'no agreement' by its log-likelihood and takes the best.
    """

    def __init__(self, model, tokenizer, adapter: str | None = None, name: str | None = None,
                 max_new_tokens: int = 48, temperature: float = 1.0, top_p: float = 1.0,
                 select_by_likelihood: bool = True, reuse_cache: bool = True):
        self.model, self.tok, self.adapter = model, tokenizer, adapter
        self.reuse_cache = reuse_cache
        self._cache: dict[tuple, tuple] = {}  # (id(state), role) -> (state, CachedPrefix of its last turn)
        self.name = name or adapter or "lm"
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.select_by_likelihood = select_by_likelihood
        self.stop_ids = [tokenizer.eos_token_id] + ([tokenizer.pad_token_id] if tokenizer.pad_token_id is not None
                                                   and tokenizer.pad_token_id != tokenizer.eos_token_id else [])
        self._batch = None                              # the DecodeBatch of submitted turns
        self._waiting: dict[int, tuple] = {}            # row key -> (request, prompt ids)
        self._ready: list[tuple[ActRequest, Utterance]] = []
        self._next_key = 0

    def _context(self):
        """Run as this agent's adapter, or as the base model when adapter is None (even on a peft model)."""
        import contextlib

        from dialogrl.models import base_model, use_adapter

        if self.adapter is None:
            return base_model(self.model)
        use_adapter(self.model, self.adapter)
        return contextlib.nullcontext()

    # The streaming interface the rollout engine uses: submit turns whenever games need one, advance one decoding
    # step at a time, collect the turns that ended. `act` is the same, for one batch of requests at once.
    def submit(self, requests: Sequence[ActRequest]) -> None:
        """Queue one turn per request; it joins the running batch (continuing from the game's cached context)."""
        from dialogrl.sampling import DecodeBatch

        if self._batch is None:
            self._batch = DecodeBatch(self.model, self.tok.pad_token_id, self.stop_ids, self.max_new_tokens,
                                      self.sampling_logprobs, keep_cache=self.reuse_cache)
        for r in requests:
            if r.state.info.get("phase") == "select" and getattr(r.task, "selector", None) is not None:
                self._ready.append((r, Utterance(r.task.selector(r.state, r.role))))  # the task's learned selection
                continue
            if self.select_by_likelihood and r.state.info.get("phase") == "select":
                self._ready.append((r, Utterance(self.select(r))))
                continue
            prompt = self.encode([r.messages])[0]
            prefix = None
            if self.reuse_cache:
                kept = self._cache.pop((id(r.state), r.role), None)
                prefix = kept[1] if kept is not None and kept[0] is r.state else None
            self._waiting[self._next_key] = (r, prompt)
            self._batch.add(self._next_key, prompt, prefix)
            self._next_key += 1

    def busy(self) -> bool:
        return bool(self._ready) or bool(self._batch)

    def advance(self) -> list[tuple[ActRequest, Utterance]]:
        """One decoding step of the running batch; the (request, utterance) pairs whose turn ended."""
        done, self._ready = self._ready, []
        if not self._batch:
            return done
        with self._context():
            finished = self._batch.step()
        for f in finished:
            r, prompt = self._waiting.pop(f.key)
            if f.cache is not None:
                self._cache[(id(r.state), r.role)] = (r.state, f.cache)
            text = self.tok.decode(f.completion, skip_special_tokens=True).strip()
            done.append((r, Utterance(text, prompt, f.completion, f.logprobs)))
        return done

    def act(self, requests: Sequence[ActRequest]) -> list[Utterance]:
        self.clear_cache(finished_only=True)
        self.submit(requests)
        said = {}
        while self.busy():
            for r, u in self.advance():
                said[id(r)] = u
        return [said[id(r)] for r in requests]

    def encode(self, messages_batch: Sequence[list[dict]]) -> list[list[int]]:
        """Each chat view through the chat template, with the generation prompt: the exact ids the role sees."""
        return [self.tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=True)
                ["input_ids"] for m in messages_batch]

    @staticmethod
    def left_pad(seqs: Sequence[list[int]], pad_id: int, device) -> tuple:
        import torch

        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s):] = torch.tensor(s)
            mask[i, width - len(s):] = 1
        return ids.to(device), mask.to(device)

    def generate(self, messages_batch: Sequence[list[dict]]) -> list[Utterance]:
        """Sample one turn for every chat view in one batch, outside any game (no cache kept)."""
        from dialogrl.sampling import sample_turns

        prompts = self.encode(messages_batch)
        with self._context():
            completions, logps, _ = sample_turns(self.model, prompts, self.tok.pad_token_id, self.stop_ids,
                                                 self.max_new_tokens, self.sampling_logprobs)
        return [Utterance(self.tok.decode(c, skip_special_tokens=True).strip(), p, c, lp)
                for p, c, lp in zip(prompts, completions, logps)]

    def clear_cache(self, finished_only: bool = False) -> None:
        """Drop the kept KV caches: all of them, or with finished_only those of games that have ended."""
        if not finished_only:
            self._cache = {}
            return
        self._cache = {k: v for k, v in self._cache.items() if not v[0].done}

    def sampling_logprobs(self, logits):
        """Log-probs of the sampling distribution: logits / temperature, then nucleus (top-p) truncation."""
        import torch

        logits = logits.float() / self.temperature
        if self.top_p < 1.0:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(-1)
            drop = probs.cumsum(-1) - probs > self.top_p        # keep the smallest prefix with mass >= top_p
            sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
            logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
        return logits.log_softmax(-1)

    def select(self, request: ActRequest) -> str:
        """The most likely selection text among every split of the pool and 'no agreement'."""
        import torch

        counts = request.state.scenario.counts
        candidates = [" ".join(f"{item}={n}" for item, n in zip(ITEMS, s)) for s in all_splits(counts)]
        candidates.append("no agreement")
        prompt = self.encode([request.messages])[0]
        seqs = [prompt + self.tok(c, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
                for c in candidates]
        dev = next(self.model.parameters()).device
        ids, mask = self.left_pad(seqs, self.tok.pad_token_id, dev)
        with torch.no_grad(), self._context():
            logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
        logp = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (N, L-1)
        total = [logp[i, -(len(s) - len(prompt)):].sum().item() for i, s in enumerate(seqs)]
        return candidates[max(range(len(candidates)), key=total.__getitem__)]


class SelectionClassifier:
    """A learned selection step for Deal or No Deal's selection protocol: from one role's view of the finished talk
    (the pool, its own values, who said what), the split it believes was agreed, or 'no agreement'.

    Lewis et al. (2017) trained a selection module on the human logs beside the language model. Small LMs scoring
    every split by their own likelihood almost never agree (about 5% of role pairs on held-out human talk with the
    1.5M-parameter warm start), so this is the same module as logistic regressions: per item type, the role's own
    count or 'no agreement', from speaker-tagged word 1-3 grams of the talk (`Y_` own words, `T_` the partner's)
    and one-hot pool counts and own values. A prediction is always a valid split of the pool (own count <= pool).
    Fit it on logged games, then give it to the task: `DealOrNoDeal(protocol="selection", selector=clf)`.
    """

    NONE = -1  # the class of 'no agreement'

    def __init__(self, n_features: int = 2**16, C: float = 1.0):
        self.n_features, self.C, self.models, self.roles = n_features, C, None, ("A", "B")

    def features(self, states: Sequence[GameState], roles: Sequence[str]):
        import scipy.sparse as sp
        from sklearn.feature_extraction.text import HashingVectorizer

        vec = HashingVectorizer(n_features=self.n_features, ngram_range=(1, 3), alternate_sign=False, norm="l2")
        texts, onehot = [], np.zeros((len(states), 3 * 8 + 3 * 11))
        for k, (state, role) in enumerate(zip(states, roles)):
            texts.append(" | ".join(" ".join(f"{'Y' if t.role == role else 'T'}_{w}" for w in t.text.lower().split())
                                    for t in state.talk_turns()))
            counts, values = state.scenario.counts, state.scenario.values[self.roles.index(role)]
            for i in range(3):
                onehot[k, 8 * i + counts[i]] = 1
                onehot[k, 24 + 11 * i + values[i]] = 1
        return sp.hstack([vec.transform(texts), sp.csr_matrix(onehot)]).tocsr()

    def fit(self, task: DealOrNoDeal, games: Sequence[GameState]) -> "SelectionClassifier":
        """Fit on finished games whose selections are known (e.g. replayed human logs): both roles of each."""
        from sklearn.linear_model import LogisticRegression

        self.roles = task.roles
        rows = [(g, r) for g in games for r in task.roles if r in g.info.get("selections", {})]
        if len(rows) < 20:
            raise ValueError(f"{len(rows)} selections to learn from; the selection classifier needs 20 or more")
        X = self.features([g for g, _ in rows], [r for _, r in rows])
        shares = [g.info["selections"][r] for g, r in rows]
        self.models = []
        for i in range(3):
            y = np.array([self.NONE if s is None else s[i] for s in shares])
            self.models.append(LogisticRegression(C=self.C, max_iter=2000).fit(X, y))
        return self

    def predict(self, states: Sequence[GameState], roles: Sequence[str]) -> list[str]:
        """The selection text of each (state, role): 'book=N hat=N ball=N' (own share) or 'no agreement'."""
        if self.models is None:
            raise RuntimeError("the selection classifier is not fitted: call fit(task, games) first")
        X = self.features(states, roles)
        probs = [m.predict_proba(X) for m in self.models]               # per item: (N, classes)
        p_none = np.mean([p[:, list(m.classes_).index(self.NONE)] if self.NONE in m.classes_ else np.zeros(len(p))
                          for p, m in zip(probs, self.models)], axis=0)  # (N,) mean over items
        out = []
        for k, state in enumerate(states):
            if p_none[k] > 0.5:
                out.append("no agreement")
                continue
            share = []
            for i, (p, m) in enumerate(zip(probs, self.models)):
                allowed = [(p[k][j], c) for j, c in enumerate(m.classes_) if 0 <= c <= state.scenario.counts[i]]
                share.append(max(allowed)[1] if allowed else 0)
            out.append(" ".join(f"{item}={n}" for item, n in zip(ITEMS, share)))
        return out

    def __call__(self, state: GameState, role: str) -> str:
        return self.predict([state], [role])[0]


# ------------------------------------------------------------------------------------------------ the corpus

def dond_corpus(n_dialogues: int = 9000, seed: int = 0, personas: Sequence[str] | None = None,
                max_turns: int = 10, views: str = "one", style: str | None = None) -> list[list[dict]]:
    """Scripted persona self-play dialogues as chat conversations, the warm-start corpus of `tiny-dond`.

    Each game pairs two personas drawn from `personas` (all by default) on a scenario drawn with `seed`.
    views="both" gives each game twice, once from each role's view (its own turns as assistant); "one" gives one
    role's view per game, alternating. Scenario seeds here are `seed` itself; evaluation draws from other seeds.
    """
    from dialogrl.rollout import play

    if views not in ("both", "one"):
        raise ValueError(f"views={views!r}: choose 'both' or 'one'")
    task = DealOrNoDeal(protocol="offer", max_turns=max_turns)
    scenarios = task.sample_scenarios(n_dialogues, seed=seed)
    pop_a = persona_population(personas, seed=seed * 2 + 1, style=style)
    pop_b = persona_population(personas, seed=seed * 2 + 2, style=style)
    corpus = []
    for k, ep in enumerate(play(task, {"A": pop_a, "B": pop_b}, scenarios)):
        roles = task.roles if views == "both" else (task.roles[k % 2],)
        corpus += [task.view(ep.state, r) for r in roles]
    return corpus
