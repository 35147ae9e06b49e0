"""A pretrained instruct model as a game's counterpart: free text from a character prompt, and the game's decisions
chosen by calibrated likelihood where the rules allow them.

    lm = LMAgent(model, tok, max_new_tokens=40, temperature=0.7)          # e.g. load_model("smollm2-135m-instruct")
    buyer = LMCounterpart(lm, name="smollm2")
    play(task, {"seller": seller, "buyer": buyer}, scenarios, seeds=...)

A 135M instruct model writes fluent replies but does not keep a marker format by prompting alone (SmolLM2-135M as a
persuadee told to end with [DONATE $x]: 0 of 32 games ended in a decision). So each of its turns has two parts:

  1. talk: the model writes a reply from `task.counterpart_prompt(scenario, role)` (its character and situation in
     plain words, no markers asked) and the conversation so far;
  2. decide: `task.counterpart_decision(state, role)` puts the questions the rules allow now (accept this offer?
     how much to give?), each answered by the model's next-word likelihood after the conversation, its own reply and
     the question. The raw likelihood carries each answer's prior (a 135M model says "yes" to nearly anything), so
     the answer is chosen by contextual calibration (Zhao et al., ICML 2021, "Calibrate before use"):

        score(a) = log p(a | conversation, question) - log p(a | content-free conversation, neutral question)

     and the highest score wins. The content-free input keeps the format (the chat template, a system line, the
     question's wording without the game's specifics) and replaces the content with "N/A". For a yes/no question
     this says yes when the conversation made "yes" more likely than it is with no content at all: a threshold
     fixed by the method, not tuned on any outcome. A decision about an offer (`Question.within`) is calibrated
     within its conversation instead: against the neutral question asked after the same talk, so the offer's
     terms move the answer and the talk's general pull does not.

If the model writes a marker of its own, the game's rules read it (valid or not, counted as the game counts invalid
turns) and nothing is asked that turn. `stats` counts turns, questions, decisions taken and markers written in text.
Replies are plain text (no token ids): a counterpart is frozen.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch

from dialogrl.agents.fastdecode import decode_batch
from dialogrl.agents.lm import LMAgent
from dialogrl.game import ActRequest, Question, StreamingAgent, Utterance
from dialogrl.hub import kv_bytes_per_token

CONTENT_FREE = "N/A"      # Zhao et al.'s content-free input
CACHE_BYTES = 2 * 2**30   # the KV cache a counterpart decodes at once, unless its LMAgent has a token budget of its own


class LMCounterpart(StreamingAgent):
    """A frozen LMAgent playing a game's counterpart role: it talks, and decides by calibrated likelihood.

    It streams: each game's talk joins the LMAgent's continuous batch when the game needs a turn (`submit`), every
    `advance` runs one decoding step, and the turns that ended get their decisions (a short prefill of each
    question after the game's cached talk) and are handed back. So the model decodes in one batch whatever the other
    role is, a scripted persona answering at once or a language model whose turns end at different steps.

    lm: the language model (its temperature and max_new_tokens shape the talk; token streams per game as LMAgent's).
    Without a token budget of its own (`max_batch_tokens`) it gets the tokens whose KV cache fills CACHE_BYTES: a
    responsiveness probe plays 200 games at once, and SmolLM2-135M's cache for them grew to 21 GB on a CPU. Games
    with seeds decode the same under any budget.
    batch_size: rows per scoring prefill.
    """

    def __init__(self, lm: LMAgent, name: str | None = None, batch_size: int = 32):
        if lm.max_batch_tokens is None:
            value = next(lm.model.parameters()).element_size()
            lm.max_batch_tokens = max(1, CACHE_BYTES // kv_bytes_per_token(lm.model.config, value))
        self.lm, self.batch_size = lm, batch_size
        self.name = name or f"counterpart({lm.name})"
        self._neutral: dict[tuple, dict[str, float]] = {}    # (neutral question, answers, system) -> log-probs
        self._talking: dict[int, tuple] = {}                 # id(the LMAgent's request) -> (request, talk chat)
        self._ready: list[tuple] = []                        # (request, talk chat, text) waiting for a decision
        self._firsts: dict[str, list[int]] = {}              # answer -> its spellings' first token ids
        self._lean = None                                    # the scoring batches' lean engine, weights fused once
        self.stats: Counter = Counter()

    def submit(self, requests: Sequence[ActRequest]) -> None:
        for r in requests:
            talk = self.talk_messages(r)
            if r.state.info.get("phase", "talk") != "talk":
                self._ready.append((r, talk, ""))           # a later phase (a selection) is the decision alone
                continue
            lm_request = ActRequest(r.task, r.state, r.role, talk)
            self._talking[id(lm_request)] = (r, talk)
            self.lm.submit([lm_request])                    # goes on from the game's cached context

    def busy(self) -> bool:
        return bool(self._ready) or self.lm.busy()

    def advance(self) -> list[tuple[ActRequest, Utterance]]:
        with torch.no_grad():
            ended = self.lm.advance() if self.lm.busy() else []
        items, self._ready = self._ready, []
        for lm_request, u in ended:
            r, talk = self._talking.pop(id(lm_request))
            items.append((r, talk, " ".join(u.text.split())))   # one line: the history shows it as one message
        if not items:
            return []
        texts = self.decide([r for r, _, _ in items], [t for _, t, _ in items], [x for _, _, x in items])
        return [(r, Utterance(text)) for (r, _, _), text in zip(items, texts)]

    def decide(self, requests, talks, texts) -> list[str]:
        """Each turn's text with the marker its decision chose appended (none where the model wrote a marker of its
        own: the rules read that one); the questions of all these games asked in one batch per round."""
        self.stats["turns"] += len(requests)
        markers = [""] * len(requests)
        pending = {}                                        # request index -> (decision generator, question)
        for i, (r, text) in enumerate(zip(requests, texts)):
            if "[" in text or "]" in text:                  # a marker of its own (or half of one)
                self.stats["marker_in_text"] += 1
                continue
            self._advance(r.task.counterpart_decision(r.state, r.role), None, i, pending, markers)
        while pending:
            idx = sorted(pending)
            chosen = self.answer([requests[i] for i in idx], [talks[i] for i in idx], [texts[i] for i in idx],
                                 [pending[i][1] for i in idx])
            for i, a in zip(idx, chosen):
                gen, _ = pending.pop(i)
                self._advance(gen, a, i, pending, markers)
        out = []
        for text, marker in zip(texts, markers):
            self.stats["decisions"] += bool(marker)
            out.append(f"{text} {marker}".strip() if marker else text)
        return out

    def _advance(self, gen, answer, i: int, pending: dict, markers: list) -> None:
        try:
            question = gen.send(answer)
        except StopIteration as stop:
            markers[i] = stop.value or ""
            return
        pending[i] = (gen, question)

    def talk_messages(self, r: ActRequest) -> list[dict]:
        """The chat the model talks from: the counterpart prompt, then the role's view of the talk without the
        game's aids for embedded models (`Task.counterpart_view`: no private notes) and without the game's own
        system line (that one asks for markers)."""
        system = r.task.counterpart_prompt(r.state.scenario, r.role)
        view = r.task.counterpart_view(r.state, r.role)
        return [{"role": "system", "content": system}] + [m for m in view if m["role"] != "system"]

    def answer(self, requests, talks, replies, questions: Sequence[Question]) -> list[str]:
        """Each question's answer with the highest calibrated score (see the module docstring)."""
        contexts = [talk + ([{"role": "assistant", "content": reply}] if reply else [])
                    for talk, reply in zip(talks, replies)]
        prefixes = [self.lm.cached_prefix(r.state, r.role) for r in requests]   # each game's talk so far
        self.stats["questions"] += len(questions)
        return [max(q.answers, key=sc.get) for q, sc in zip(questions, self.scores(requests, contexts, questions,
                                                                                     prefixes))]

    def scores(self, requests, contexts, questions: Sequence[Question], prefixes=None) -> list[dict[str, float]]:
        """Every answer's calibrated score after each context (a chat without the question): log p(a | context,
        question) minus log p(a) after the content-free context and the neutral question, or, for a question
        calibrated `within` its conversation, after the same context and the neutral question (so that only the
        question's specifics count). prefixes: per context, a cached context it begins with, or None."""
        prefixes = list(prefixes or [None] * len(contexts))
        chats = [c + [{"role": "user", "content": q.text}] for c, q in zip(contexts, questions)]
        inner = [i for i, q in enumerate(questions) if q.within]
        chats += [contexts[i] + [{"role": "user", "content": questions[i].neutral or questions[i].text}]
                  for i in inner]
        logps = self.answer_logprobs(chats, list(questions) + [questions[i] for i in inner],
                                     prefixes + [prefixes[i] for i in inner])
        within = dict(zip(inner, logps[len(questions):]))
        out = []
        for i, (r, q, lp) in enumerate(zip(requests, questions, logps)):
            base = within[i] if q.within else self.neutral_logprobs(
                q, r.task.counterpart_prompt(r.state.scenario, r.role))
            out.append({a: lp[a] - base[a] for a in q.answers})
        return out

    def neutral_logprobs(self, q: Question, system: str) -> dict[str, float]:
        """log p(answer | content-free input): the character's system line kept (its disposition is part of the
        content we want), the conversation and the question's specifics replaced by N/A and the neutral question."""
        key = (q.neutral or q.text, q.answers, system)
        if key not in self._neutral:
            chat = [{"role": "system", "content": system}, {"role": "user", "content": CONTENT_FREE},
                    {"role": "assistant", "content": CONTENT_FREE}, {"role": "user", "content": q.neutral or q.text}]
            self._neutral[key] = self.answer_logprobs([chat], [q])[0]
        return self._neutral[key]

    def answer_logprobs(self, chats: Sequence[list[dict]], questions: Sequence[Question],
                        prefixes: Sequence | None = None) -> list[dict[str, float]]:
        """Per chat, each answer's log-probability as the assistant's first word: the log-sum-exp over the answer's
        spellings (as written, Capitalised, UPPER) of the first token of each, after the generation prompt.
        prefixes: per chat, a cached context it begins with (sampling.CachedPrefix) or None; the decoding engine
        runs only what follows it."""
        tok = self.lm.tok
        for a in {a for q in questions for a in q.answers} - set(self._firsts):
            self._firsts[a] = first_tokens(tok, a)
        firsts = [{a: self._firsts[a] for a in q.answers} for q in questions]
        for q, f in zip(questions, firsts):
            ids = [t for a in q.answers for t in f[a]]
            if len(ids) != len(set(ids)):
                raise ValueError(f"answers {q.answers} of {q.text!r} share a first token: each must start with "
                                 "its own word")
        prompts = self.lm.encode(chats)
        prefixes = prefixes or [None] * len(chats)
        out = []
        for rows in chunks(prompts, self.batch_size, self.lm.max_batch_tokens):
            batch = decode_batch(self.lm.model, tok.pad_token_id, self.lm.stop_ids, 1, self.lm.sampling_logprobs,
                                 lean=self.lm.lean)
            if hasattr(batch, "lean"):                      # the lean engine: its fused weights built once, kept
                self._lean = batch.lean = self._lean or batch.lean
            for i in rows:
                batch.add(i, prompts[i], prefixes[i])
            with torch.no_grad(), self.lm._context():
                logits = batch.prefill()                    # key -> (V,)
            for i in rows:
                row = logits[i].float().log_softmax(-1)
                out.append({a: torch.logsumexp(row[ids], 0).item() for a, ids in firsts[i].items()})
        return out

    def clear_cache(self) -> None:
        self.lm.clear_cache()
        self._talking, self._ready = {}, []


def chunks(prompts: Sequence[Sequence[int]], rows: int, tokens: int | None = None) -> list[range]:
    """Consecutive runs of `prompts`' indices of at most `rows` prompts and, with `tokens`, at most that many prompt
    tokens each (a prompt over the budget alone): the batches of one scoring pass, bounded by tokens, not rows."""
    out, start, held = [], 0, 0
    for i, p in enumerate(prompts):
        if i > start and (i - start >= rows or (tokens is not None and held + len(p) > tokens)):
            out.append(range(start, i))
            start, held = i, 0
        held += len(p)
    if len(prompts) > start:
        out.append(range(start, len(prompts)))
    return out


def first_tokens(tok, answer: str) -> list[int]:
    """The first token id of each spelling of `answer` (as written, Capitalised, UPPER), distinct."""
    spellings = {answer, answer[:1].upper() + answer[1:], answer.upper()}
    return sorted({tok(s, add_special_tokens=False)["input_ids"][0] for s in spellings})


def decision_scores(counterpart: LMCounterpart, task, states, role: str) -> list[dict[str, float] | None]:
    """The calibrated score of each answer to the first question `role`'s decision would ask now in each game
    (None where it asks none), its own reply left out: how the decision responds to a conversation, measured on
    given (e.g. scripted) conversations without sampling. papers/README.md reports it per game."""
    requests = [ActRequest(task, s, role, task.view(s, role)) for s in states]
    asked = []
    for i, r in enumerate(requests):
        try:
            asked.append((i, next(task.counterpart_decision(r.state, role))))
        except StopIteration:
            pass
    out: list[dict[str, float] | None] = [None] * len(states)
    if asked:
        scores = counterpart.scores([requests[i] for i, _ in asked],
                                    [counterpart.talk_messages(requests[i]) for i, _ in asked], [q for _, q in asked])
        for (i, _), sc in zip(asked, scores):
            out[i] = sc
    return out
