"""Language-model agents: `LMAgent` speaks for a role with a causal LM (optionally one LoRA adapter of it).

The agent interface (`Agent`, `StreamingAgent`, `ActRequest`, `Utterance`, `Population`) is in `dialogrl.game`;
each game's scripted personas are in its package (`dialogrl.envs.<game>.personas`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import random
from collections.abc import Sequence

import torch

from dialogrl.agents.fastdecode import decode_batch, sample_turns, uses_lean
from dialogrl.agents.sampling import FORWARDS, SharedBatch
from dialogrl.game import ActRequest, GameState, StreamingAgent, Utterance, game_key
from dialogrl.models import base_model, load_model, use_adapter
from dialogrl.seeds import stream_rng
from dialogrl.tokens import pad, token_logprobs
from dialogrl.verbalized import VS_MODES, fallback_rate, parse_vs, problem_kind, vs_messages

__all__ = ["LMAgent", "VerbalizedSampling"]


class LMAgent(StreamingAgent):
    """A causal LM (optionally one named LoRA adapter of it) that speaks from its chat view.

    Turns are sampled with continuous batching (dialogrl.agents.sampling.DecodeBatch): the rollout engine `submit`s a
    turn whenever a game needs one and `advance`s the running batch one token at a time, so a game's next turn joins
    as soon as its previous one ends (stop at the end-of-turn token, at most `max_new_tokens` per turn); with
    `reuse_cache` each game continues from its KV cache of the role's previous turn. `act(requests)` does the same
    for one batch. Each Utterance keeps the prompt ids the role saw, the sampled completion ids and their
    log-probs under the sampling distribution (after temperature and top-p). A game with a seed (GameState.seed)
    samples each role's tokens from its own stream (`rng`), so it plays the same in any batch; a game without one
    samples from torch's global generator.
    With `share_batch` (the default), agents of one model that decode on the HF engine (a GPU, bf16 weights, or
    lean=False) share one running batch, each row through its own agent's adapter (`sampling.SharedBatch`): two
    roles played by adapters of one model take one forward pass a decoding step, not one each. The lean engine (fp32
    on the CPU) folds one adapter into its weights, so there each agent keeps its own batch.
    `max_batch_tokens` bounds what its decoding batch holds at once by tokens (each live row's prompt and turn
    length; `sampling.RowQueue`), not by rows: a judge's long prompts or a population's many games wait their turn
    instead of filling a GPU's memory (None: no bound; a shared batch takes the smallest of its agents' bounds).
    In a selection phase (Deal or No Deal, `selection` protocol) the agent does not decode: it uses the task's
    learned `selector` when it has one, else (with `select_by_likelihood`) it scores each of the task's
    `selection_candidates(state)` (every valid split of the pool and 'no agreement') by its log-likelihood and takes
    the best.
    """

    @classmethod
    def load(cls, model: str, bf16: bool = False, device: str = "auto", **kwargs) -> LMAgent:
        """An LMAgent on a freshly loaded model (`models.load_model(model, device=device, bf16=bf16)`: an embedded
        name, a local folder, a packaged model or a hub id); kwargs are the agent's (name, max_new_tokens, ...)."""
        return cls(*load_model(str(model), device=device, bf16=bf16), **kwargs)

    def __init__(self, model, tokenizer, adapter: str | None = None, name: str | None = None,
                 max_new_tokens: int = 48, temperature: float = 1.0, top_p: float = 1.0,
                 select_by_likelihood: bool = True, reuse_cache: bool = True, lean: bool | None = None,
                 share_batch: bool = True, max_batch_tokens: int | None = None):
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens={max_batch_tokens!r}: a positive token budget, or None")
        self.model, self.tok, self.adapter = model, tokenizer, adapter
        self.max_batch_tokens = max_batch_tokens
        self.share_batch = share_batch
        self.lean = lean  # the decoding engine: see dialogrl.agents.fastdecode.decode_batch
        self.reuse_cache = reuse_cache
        self._cache: dict[tuple, tuple] = {}  # (id(state), role) -> (state, CachedPrefix of its last turn)
        self._rngs: dict[tuple, tuple] = {}   # (id(state), role) -> (state, the role's token stream in that game)
        self.name = name or adapter or "lm"
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.select_by_likelihood = select_by_likelihood
        self.stop_ids = [tokenizer.eos_token_id] + ([tokenizer.pad_token_id] if tokenizer.pad_token_id is not None
                                                   and tokenizer.pad_token_id != tokenizer.eos_token_id else [])
        self._batch = None                              # the DecodeBatch of submitted turns, or the SharedBatch
        self._shared = None                             # that SharedBatch (rows keyed (owner, key)), if shared
        self._owner, self._seen = next(_OWNERS), -1     # this agent's rows in a SharedBatch; its step at our last look
        self._waiting: dict[int, tuple] = {}            # row key -> (request, prompt ids)
        self._ready: list[tuple[ActRequest, Utterance]] = []
        self._next_key = 0

    def _context(self):
        """Run as this agent's adapter, or as the base model when adapter is None (even on a peft model)."""
        if self.adapter is None:
            return base_model(self.model)
        use_adapter(self.model, self.adapter)
        return contextlib.nullcontext()

    # The streaming interface the rollout engine uses: submit turns whenever games need one, advance one decoding
    # step at a time, collect the turns that ended. `act` is the same, for one batch of requests at once.
    def submit(self, requests: Sequence[ActRequest]) -> None:
        """Queue one turn per request; it joins the running batch (continuing from the game's cached context)."""
        if self._batch is None and self.share_batch and not uses_lean(self.model, self.lean):
            self._batch = self._shared = SharedBatch.of(self.model, self.tok.pad_token_id, self.stop_ids)
            if self.max_batch_tokens is not None:   # the smallest bound of the agents that share it
                bound = self._shared.batch.max_tokens
                self._shared.batch.max_tokens = min(bound or self.max_batch_tokens, self.max_batch_tokens)
        if self._batch is None:
            self._batch = decode_batch(self.model, self.tok.pad_token_id, self.stop_ids, self.max_new_tokens,
                                       self.sampling_logprobs, keep_cache=self.reuse_cache, lean=self.lean,
                                       max_tokens=self.max_batch_tokens)
        for r in requests:
            if r.state.info.get("phase") == "select" and getattr(r.task, "selector", None) is not None:
                self._ready.append((r, Utterance(r.task.selector(r.state, r.role))))  # the task's learned selection
                continue
            if self.select_by_likelihood and r.state.info.get("phase") == "select":
                self._ready.append((r, Utterance(self.select(r))))
                continue
            prompt = self.encode([r.messages])[0]
            self._waiting[self._next_key] = (r, prompt)
            self._add_row(self._next_key, r, prompt)
            self._next_key += 1

    def _add_row(self, key: int, r: ActRequest, prompt: list[int]) -> None:
        """Queue one turn in the running batch, continuing from the game's cached context where it has one."""
        prefix = None
        if self.reuse_cache:
            kept = self._cache.pop((id(r.state), r.role), None)
            prefix = kept[1] if kept is not None and kept[0] is r.state else None
        if self._shared is not None:
            self._shared.batch.add((self._owner, key), prompt, prefix, self.rng(r.state, r.role),
                                   adapter=self.adapter or "__base__", logprob_fn=self.sampling_logprobs,
                                   max_new_tokens=self.max_new_tokens)
        else:
            self._batch.add(key, prompt, prefix, self.rng(r.state, r.role))

    def busy(self) -> bool:
        return bool(self._ready) or (bool(self._waiting) if self._shared is not None else bool(self._batch))

    def advance(self) -> list[tuple[ActRequest, Utterance]]:
        """One decoding step of the running batch; the (request, utterance) pairs whose turn ended. In a shared
        batch that another agent stepped since this agent's last look, no step: that step's finished rows."""
        done, self._ready = self._ready, []
        shared = self._shared
        if shared is not None:
            if shared.due(self._seen) and self._waiting:   # due: every turn of ours it finished, we collected
                shared.step()
            self._seen = shared.steps
            finished = [dataclasses.replace(f, key=f.key[1]) for f in shared.collect(self._owner)
                        if f.key[1] in self._waiting]
        elif not self._batch:
            return done
        else:
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

    def generate(self, messages_batch: Sequence[list[dict]],
                 rngs: Sequence[random.Random | None] | None = None) -> list[Utterance]:
        """Sample one turn for every chat view in one batch, outside any game (no cache kept); rngs: per view, the
        stream its tokens are drawn from (e.g. `rng(state, role)`), or None (torch's global generator)."""
        prompts = self.encode(messages_batch)
        with self._context():
            completions, logps, _ = sample_turns(self.model, prompts, self.tok.pad_token_id, self.stop_ids,
                                                 self.max_new_tokens, self.sampling_logprobs, lean=self.lean,
                                                 rngs=rngs, max_tokens=self.max_batch_tokens)
        return [Utterance(self.tok.decode(c, skip_special_tokens=True).strip(), p, c, lp)
                for p, c, lp in zip(prompts, completions, logps)]

    def cached_prefix(self, state: GameState, role: str):
        """The KV cache of `role`'s last turn in this game (its prompt and completion: sampling.CachedPrefix), or
        None: what a later prompt that begins with that turn can go on from."""
        kept = self._cache.get((id(state), role))
        return kept[1] if kept is not None and kept[0] is state else None

    def rng(self, state: GameState, role: str) -> random.Random | None:
        """The stream `role`'s tokens are sampled from in this game: one random.Random per (game, role), seeded by
        stream_seed("tokens", game seed, role) and kept for the game's lifetime; None for a game without a seed."""
        if state.seed is None:
            return None
        kept = self._rngs.get((id(state), role))
        if kept is None or kept[0] is not state:
            kept = self._rngs[id(state), role] = (state, stream_rng("tokens", state.seed, role))
        return kept[1]

    def clear_cache(self, finished_only: bool = False) -> None:
        """Drop the kept KV caches and token streams: all of them, or with finished_only those of ended games."""
        if not finished_only:
            self._cache, self._rngs = {}, {}
            if self._shared is not None:
                self._shared.collect(self._owner)   # turns finished for games no one waits for any more
            return
        self._cache = {k: v for k, v in self._cache.items() if not v[0].done}
        self._rngs = {k: v for k, v in self._rngs.items() if not v[0].done}

    def sampling_logprobs(self, logits):
        """Log-probs of the sampling distribution: logits / temperature, then nucleus (top-p) truncation."""
        logits = logits.float() / self.temperature
        if self.top_p < 1.0:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(-1)
            drop = probs.cumsum(-1) - probs > self.top_p        # keep the smallest prefix with mass >= top_p
            sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
            logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
        return logits.log_softmax(-1)

    def select(self, request: ActRequest) -> str:
        """The most likely of the task's selection texts (`task.selection_candidates(state)`)."""
        scores = self.selection_scores(request)
        return max(scores, key=scores.get)

    def selection_scores(self, request: ActRequest) -> dict[str, float]:
        """Each selection text's log-likelihood after the role's prompt: the summed log-probs of its tokens and the
        end-of-turn token, all candidates in one left-padded batch (each scored as it would be alone)."""
        candidates = request.task.selection_candidates(request.state)
        prompt = self.encode([request.messages])[0]
        seqs = [prompt + self.tok(c, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
                for c in candidates]
        dev = next(self.model.parameters()).device
        ids, mask, pos = pad(seqs, self.tok.pad_token_id, device=dev)
        keep = max(len(s) for s in seqs) - len(prompt) + 1   # the logits that predict the candidates' tokens: not
        FORWARDS.add()                                       # the prompt's (N x L x vocabulary floats, gigabytes)
        with torch.no_grad(), self._context():
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep).logits
        logp = token_logprobs(logits[:, :-1].float(), ids[:, 1 - keep:])  # (N, keep - 1): the last tokens'
        return {c: logp[i, -(len(s) - len(prompt)):].sum().item() for i, (c, s) in enumerate(zip(candidates, seqs))}


_OWNERS = itertools.count()   # each LMAgent's key prefix in a SharedBatch (never reused, unlike id())


# ------------------------------------------------------------------------------------------ Verbalized Sampling

class VerbalizedSampling(StreamingAgent):
    """Verbalized Sampling around an LMAgent: each turn the model is asked for `k` candidate replies with their
    probabilities (`vs_messages`), and one candidate is drawn: uniformly (`mode="random"`, the published main
    setting) or by the stated probabilities (`mode="prob"`). An unusable answer is asked again up to `retries` times;
    after that the raw text is the reply (a fallback). Every attempt's outcome is counted in `stats`: turns,
    attempts, problems by kind, fallbacks and renormalised answers; `fallback_rate` is fallbacks per turn.

    It streams: every answer (and every re-ask) joins the wrapped LMAgent's running batch, so a game whose turn needs
    a long answer does not hold up the other games (`submit`, `busy`, `advance`, as the rollout engine drives an
    LMAgent). `lm` is the wrapper's own: the same LMAgent object must not also speak for another role of the same
    games. A selection phase (Deal or No Deal) goes to `lm` as it is: VS rewrites replies, not the final choice.

    The draw is reproducible per game: random.Random of (seed, game, role, turn), the game being its seed's "vs"
    stream (`game_key`; every dialogue of a group draws apart) or, without a game seed, its scenario id. The model
    samples from the game's token stream (`LMAgent.rng`), or from torch's global generator in a game without a seed.
    Replies are plain text (no token ids): a VS simulator is a frozen counterpart.
    """

    def __init__(self, lm: LMAgent, k: int = 5, mode: str = "random", retries: int = 2, seed: int = 0,
                 name: str | None = None, speaker: str = "You", counterpart: str = "Partner"):
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k={k!r}: must be an int >= 1")
        if mode not in VS_MODES:
            raise ValueError(f"mode={mode!r}: choose one of {', '.join(VS_MODES)}")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries={retries!r}: must be an int >= 0")
        self.lm, self.k, self.mode, self.retries, self.seed = lm, k, mode, retries, seed
        self.speaker, self.counterpart = speaker, counterpart
        self.name = name or f"vs-{mode}({lm.name})"
        self.stats: dict = {}
        self.reset_stats()
        self._asked: dict[int, tuple[ActRequest, int]] = {}   # id(the request lm answers) -> (the game's, attempt)

    def reset_stats(self) -> None:
        self.stats = {"turns": 0, "attempts": 0, "fallbacks": 0, "renormalised": 0, "problems": {}}

    @property
    def fallback_rate(self) -> float:
        return fallback_rate(self.stats)

    def choose(self, candidates: Sequence[tuple[str, float]], request: ActRequest) -> str:
        rng = random.Random(f"{self.seed}/{game_key(request.state, 'vs')}/{request.role}/{len(request.state.turns)}")
        if self.mode == "random":
            return rng.choice(candidates)[0]
        return rng.choices([t for t, _ in candidates], weights=[p for _, p in candidates])[0]

    def submit(self, requests: Sequence[ActRequest]) -> None:
        """Ask for each request's k candidates: one answer each in the wrapped model's running batch."""
        self.stats["turns"] += sum(r.state.info.get("phase") != "select" for r in requests)
        self._ask([(r, 0) for r in requests])

    def _ask(self, asks: list[tuple[ActRequest, int]]) -> None:
        out = []
        for r, attempt in asks:
            if r.state.info.get("phase") == "select":
                ask = r
            else:
                ask = dataclasses.replace(r, messages=vs_messages(r.messages, self.k, self.speaker, self.counterpart))
                self.stats["attempts"] += 1
            self._asked[id(ask)] = (r, attempt)
            out.append(ask)
        self.lm.submit(out)

    def busy(self) -> bool:
        return bool(self._asked)

    def advance(self) -> list[tuple[ActRequest, Utterance]]:
        """One step of the wrapped model's batch; the game requests whose reply is settled: a drawn candidate, or
        the raw text of the last unusable answer. Unusable answers with retries left are asked again."""
        done, again = [], []
        for ask, u in self.lm.advance():
            r, attempt = self._asked.pop(id(ask))
            if ask is r:   # a selection, passed through
                done.append((r, Utterance(u.text)))
                continue
            candidates, problem = parse_vs(u.text, self.k)
            if problem is not None:
                kind = problem_kind(problem)
                self.stats["problems"][kind] = self.stats["problems"].get(kind, 0) + 1
            if candidates is not None:
                self.stats["renormalised"] += problem is not None
                done.append((r, Utterance(self.choose(candidates, r))))
            elif attempt < self.retries:
                again.append((r, attempt + 1))
            else:   # still unusable after the retries: the raw text, counted
                self.stats["fallbacks"] += 1
                done.append((r, Utterance(u.text)))
        if again:
            self._ask(again)
        return done

    def act(self, requests: Sequence[ActRequest]) -> list[str]:
        said = super().act(requests)
        self.lm.clear_cache(finished_only=True)
        return said

    def clear_cache(self) -> None:
        self.lm.clear_cache()
