"""The rule-based process-reward judge of the social game (the `cpu` profile's reward model).

For each agent turn it infers the stage from the context (not the turn count):
    early  the request is not on the table yet (no ask so far, none in this turn) and this is not its last turn
    mid    the request has been made, no agreement yet
    late   an agreement was given (the closing turn), or this is the agent's last turn
then writes each dimension's criteria by choosing 2-4 from a bank by stage and context (the partner's last move,
what the agent said before), checks each against the text and the game state (`acts.hear`, the scene), and proposes
weights: the stage's prior (rewards.MANUAL_SCHEDULE) moved by the state (+0.10 relational attunement when the
relationship so far is below zero, +0.10 strategic positioning after a refusal, +0.15 goal advancement in a last
turn without an ask yet), for rewards.sanitize_weights to check.

What it reads is what the act-reading partners' rules read: its criteria test acts.py's cues (reason, offer, the
partner's concern, pressure, ...) and its weights the act rules' favourability (`relationship_trace`), the very
features behind those partners' agreement and the relationship score. Against them its process reward shapes toward
the partner's hidden utility. Claims about the process reward and the relationship are therefore read against
partners whose rule it does not read: the `concrete-terms` family (task.TermsProfile, e.g. `literal`), which hears
no act and keeps its own favourability; notebook 02 reports them apart from the act-reading partners.

`episode_estimates` reads a whole dialogue of any source (the SOTOPIA episodes' "Name said: ..." turns) and gives the
judge's episode-level goal (0..10) and relationship (-5..5) estimates for one side, for the judge's validation
against GPT-4's scores.
"""
from __future__ import annotations

import re

from dialogrl.envs.social.acts import hear
from dialogrl.envs.social.scenes import Scene
from dialogrl.envs.social.task import WARM_ACTS, SocialScenes, relationship_trace
from dialogrl.game import GameState
from dialogrl.rewards import DIMENSIONS, MANUAL_SCHEDULE, Criterion, Judge, Judgement

_POLITE = re.compile(r"\b(please|could|would|mind|if you can|if possible)\b")
_OFF_CHARACTER = re.compile(r"\b(as an ai|language model|assistant|i am an ai|openai)\b")
_GIVE_UP = re.compile(r"\b(never ?mind|forget it|forget about it|doesn't matter)\b")
_WORD = re.compile(r"[a-z']+")
_STOP = set("a an the and or but to of in on for at is are was be it i you me my your we this that with so do "
            "not no yes just can could would will please".split())


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 2}


def _repeats(text: str) -> bool:
    """A word three times in a row, or a sentence said twice."""
    words = _WORD.findall(text.lower())
    if any(words[i] == words[i + 1] == words[i + 2] for i in range(len(words) - 2)):
        return True
    sentences = [s.strip() for s in re.split(r"[.!?]+", text.lower()) if s.strip()]
    return len(sentences) != len(set(sentences))


def stage_of(state: GameState, k: int, last_agent_turn: bool) -> str:
    """The stage of the agent's turn state.talk_turns()[k], from the context before it and the turn itself."""
    talk, scene = state.talk_turns(), state.scenario.scene
    if any(t.role == "partner" and t.invalid is None and t.action.get("type") == "agree" for t in talk[:k]):
        return "late"
    if last_agent_turn:
        return "late"
    asked = any("ask" in hear(t.text, scene) for t in talk[:k + 1] if t.role == "agent")
    return "mid" if asked else "early"


class RuleJudge(Judge):
    """Criteria from a bank, chosen by stage and context, checked by rules (see the module docstring)."""
    name = "rule"

    def judge(self, task: SocialScenes, state: GameState, role: str = "agent") -> list[Judgement]:
        if role != "agent":
            raise ValueError(f"role={role!r}: the social judge scores the agent's turns")
        talk = state.talk_turns()
        mine = [k for k, t in enumerate(talk) if t.role == "agent"]
        trace = relationship_trace(state)
        out = []
        for n, k in enumerate(mine):
            stage = stage_of(state, k, last_agent_turn=k >= task.max_turns - 2)
            crit = self.criteria(state, k, stage, trace[n - 1] if n else 0.0)
            out.append(Judgement(stage, crit, self.propose(state, k, stage, trace[n - 1] if n else 0.0)))
        return out

    # -- the criteria bank
    def criteria(self, state: GameState, k: int, stage: str, favour: float) -> dict[str, list[Criterion]]:
        talk, scene = state.talk_turns(), state.scenario.scene
        t = talk[k]
        text, low = t.text, t.text.lower()
        acts = set(hear(text, scene))
        before = [x for x in talk[:k] if x.role == "agent"]
        prev_partner = talk[k - 1] if k else None
        refused = prev_partner is not None and prev_partner.action.get("type") == "refuse"
        agreed = stage == "late" and any(x.role == "partner" and x.action.get("type") == "agree" for x in talk[:k])
        asked_before = any("ask" in hear(x.text, scene) for x in before)
        pressed_before = any("pressure" in hear(x.text, scene) for x in before)
        n_words = len(text.split())
        c: dict[str, list[tuple[str, bool]]] = {d: [] for d in DIMENSIONS}

        ga = c["goal_advancement"]
        ga.append(("does not drop the goal (no 'never mind', 'forget it')", not _GIVE_UP.search(low)))
        if agreed:
            ga.append(("closes without reopening the request", "ask" not in acts and "pressure" not in acts))
        elif stage == "early":
            ga.append(("prepares the request: talks about the scene or the partner", bool(acts & {
                "greet", "rapport", "concern", "empathy", "reason"}) or bool(_words(text) & _words(scene.ask))))
        else:
            ga.append(("asks for the request or backs it (an ask, a reason or an offer)",
                       bool(acts & {"ask", "reason", "offer"})))
            if stage == "late":
                ga.append(("makes the request before the talk ends", "ask" in acts or asked_before))
            if refused:
                ga.append(("answers the refusal with something new (a reason, an offer, its concern)",
                           bool(acts & {"reason", "offer", "concern"})))

        sp = c["strategic_positioning"]
        sp.append(("no pressure and no insults", not acts & {"pressure", "insult"}))
        if not before:
            sp.append(("does not open with the request cold (greets or builds rapport first)",
                       "ask" not in acts or bool(acts & {"greet", "rapport"})))
        if stage == "mid":
            sp.append(("backs the request with a reason or an offer", bool(acts & {"reason", "offer"})))
        if before:
            sp.append(("does not repeat its previous turn",
                       _jaccard(_words(text), _words(before[-1].text)) < 0.8 or not _words(text)))

        ra = c["relational_attunement"]
        if stage == "early":
            ra.append(("builds rapport (a greeting, a friendly question)", bool(acts & {"greet", "rapport"})))
        else:
            ra.append(("asks politely, or not at all (please, could, would)",
                       "ask" not in acts or bool(_POLITE.search(low))))
        ra.append(("acknowledges the partner's concern or feelings", bool(acts & {"concern", "empathy"})))
        if agreed:
            ra.append(("thanks the partner", "appreciate" in acts))
        if refused or pressed_before or favour < 0:
            ra.append(("repairs the mood (an apology, empathy, its concern)",
                       bool(acts & {"apology", "empathy", "concern"})))

        pc = c["persona_consistency"]
        pc.append(("speaks as the one who asks: no partner's marker", t.invalid is None))
        pc.append(("stays in character (no talk of being an AI or an assistant)", not _OFF_CHARACTER.search(low)))
        if state.scenario.relationship >= 3:
            pc.append(("no insults toward someone close", "insult" not in acts))

        cc = c["contextual_coherence"]
        if prev_partner is None:
            cc.append(("opens the conversation (a greeting or the topic)",
                       bool(acts & {"greet", "rapport"}) or bool(_words(text) & _words(scene.ask))))
        else:
            cc.append(("responds to the partner's last turn (takes up its words, or acknowledges it)",
                       bool(_words(text) & _words(prev_partner.text)) or bool(acts & {"empathy", "appreciate",
                                                                                          "concern", "apology"})))
        cc.append(("stays on the scene (its request, the partner's concern, the setting)",
                   bool(_words(text) & (_words(scene.ask) | _words(scene.setting) | set(scene.cues)))
                   or "concern" in acts or bool(acts & {"greet", "rapport", "appreciate"})))
        if refused:
            cc.append(("does not ignore the refusal (no bare new ask)",
                       "ask" not in acts or bool(acts & {"reason", "offer", "concern", "empathy", "apology"})))

        tq = c["turn_quality"]
        tq.append(("between 3 and 60 words", 3 <= n_words <= 60))
        tq.append(("no repeated words or sentences", not _repeats(text)))
        tq.append(("well formed: ASCII, ends with punctuation", text.isascii() and text.rstrip()[-1:] in ".!?"))

        return {d: [Criterion(d, s, bool(ok)) for s, ok in c[d]] for d in DIMENSIONS}

    @staticmethod
    def propose(state: GameState, k: int, stage: str, favour: float) -> dict[str, float]:
        """The stage prior, moved by the state (see the module docstring)."""
        w = dict(zip(DIMENSIONS, MANUAL_SCHEDULE[stage]))
        talk, scene = state.talk_turns(), state.scenario.scene
        if favour < 0:
            w["relational_attunement"] += 0.10
        if k and talk[k - 1].action.get("type") == "refuse":
            w["strategic_positioning"] += 0.10
        asked = any("ask" in hear(t.text, scene) for t in talk[:k + 1] if t.role == "agent")
        if stage == "late" and not asked:
            w["goal_advancement"] += 0.15
        return w

    # -- whole episodes (validation on other dialogues)
    @staticmethod
    def episode_estimates(turns: list[tuple[str, str]], me: str, goals: tuple[str, str] | None = None,
                          scene: Scene | None = None) -> dict[str, float]:
        """Episode-level estimates for speaker `me` of a dialogue given as (speaker, text) turns, with `goals` (its
        goal text, the other side's) when known.

        goal 0..10 = 10 x the other side's final stance (1 it agrees in its last two turns, 0.5 a conditional or
        partial yes, 0 otherwise; 0 too if `me` never asks or proposes) x the share of the settlement that is its
        goal (how many content words of its goal, against the other's, the last two turns of both sides use; 1
        without goals). relationship -5..5: the game's favourability rules over its turns (warm acts with the
        game's weights and wear-off, pressure and insults)."""
        mine = [t for s, t in turns if s == me]
        theirs = [t for s, t in turns if s != me]
        proposes = any(set(hear(t, scene)) & {"ask", "offer"} or _PROPOSE.search(t.lower()) for t in mine)
        tail = " ".join(theirs[-2:]).lower()
        yes = _YES.search(tail)
        partly = _PARTLY.search(tail)
        no = _NO.search(tail)
        stance = 0.0 if not proposes else 1.0 if yes and not (no or partly) else 0.5 if yes or partly else 0.0
        share = 1.0
        if goals is not None:
            settled = _words(" ".join(t for _, t in turns[-4:]))
            a, b = len(settled & _words(goals[0])), len(settled & _words(goals[1]))
            share = a / (a + b) if a + b else 0.5
        f = 0.0
        seen: dict[str, int] = {}
        for t in mine:
            acts = set(hear(t, scene))
            for act, w in WARM_ACTS.items():
                if act in acts:
                    f += w * (1.0, 0.5, 0.0)[min(seen.get(act, 0), 2)]
                    seen[act] = seen.get(act, 0) + 1
            f -= 1.0 * ("pressure" in acts) + 1.5 * ("insult" in acts)
        return {"goal": 10.0 * stance * share, "relationship": max(-5.0, min(5.0, f))}


_PROPOSE = re.compile(r"\b(how about|what if|let's|we could|we can|i suggest|i propose|why don't we)\b")
_YES = re.compile(r"\b(deal|agreed|i agree|okay|ok|sure|sounds good|alright|you're right|let's do|fine|that works)\b")
_PARTLY = re.compile(r"\b(but only|how about|if you|instead|compromise|half|meet in the middle)\b")
_NO = re.compile(r"\b(no|can't|cannot|won't|not going to|refuse)\b")


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0
