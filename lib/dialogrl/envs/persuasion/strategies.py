"""Persuasion strategies: the ten of Wang et al. (2019), how a scripted persuadee hears them (a cue lexicon), and a
classifier fit on the 300 annotated human dialogues that labels any persuader's sentences (the policies' strategies).

STRATEGIES are the annotation's persuasion strategies (`er_label_1`); LABELS adds `ask` (the annotation's
proposition-of-donation, ask-donation-amount and ask-donate-more: the request itself) and `other` (greetings, thanks,
off-task talk and the rest).
"""
from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence

import numpy as np

from dialogrl.game import has_cue

STRATEGIES = ("credibility-appeal", "logical-appeal", "emotion-appeal", "personal-story", "donation-information",
              "foot-in-the-door", "self-modeling", "source-related-inquiry", "task-related-inquiry",
              "personal-related-inquiry")
ASK_LABELS = ("proposition-of-donation", "ask-donation-amount", "ask-donate-more")
LABELS = STRATEGIES + ("ask", "other")

# What a scripted persuadee hears: a strategy is heard when one of its cues occurs in the persuader's words (lower
# case, whole words at the cue's edges). The scripted persuaders' phrases carry these cues; they also catch much of
# how people and models say the same things.
CUES: dict[str, tuple[str, ...]] = {
    "credibility-appeal": ("reputable", "trusted", "founded", "charity navigator", "accredited",
                           "established", "track record", "100 years", "transparent"),
    "logical-appeal": ("every dollar", "goes a long way", "makes a difference", "adds up", "it's logical",
                       "think about it", "that means", "can buy", "pays for", "provides"),
    "emotion-appeal": ("imagine", "heartbreaking", "suffering", "starving", "innocent", "desperate",
                       "heart", "dying", "hungry"),
    "personal-story": ("i remember", "when i was", "my friend", "my family", "i once", "i saw", "my mom", "my sister"),
    "donation-information": ("deducted", "from your payment", "task payment", "directly to", "at the end of the task",
                             "from 0 to", "the researchers", "sent to the charity"),
    "foot-in-the-door": ("even a little", "few cents", "small amount", "just 10 cents", "a dime", "any amount",
                         "even $0", "a little bit", "just a bit"),
    "self-modeling": ("i will donate", "i'll donate", "i'm donating", "i am donating", "i donated", "i'm giving",
                      "i will give", "i'll give"),
    "source-related-inquiry": ("have you heard of", "do you know about", "are you familiar", "heard about"),
    "task-related-inquiry": ("have you ever donated", "do you donate", "do you give to", "ever given",
                             "charities do you", "do you usually"),
    "personal-related-inquiry": ("do you have kids", "do you have children", "where are you from",
                                 "your family", "about yourself"),
    "ask": ("would you donate", "would you like to donate", "will you donate", "could you donate", "can you donate",
            "would you consider", "how much would you", "how much will you", "care to donate", "donate some"),
}


# Pressure: demands and insults, which no strategy of the annotation names (its persuaders were polite). A scripted
# persuadee that hears them in a turn likes giving less (personas.PRESSURE), so that a rude persuader fares worse
# than a polite one (the responsiveness check's probe, `personas.probe`).
PRESSURE_CUES = ("selfish", "greedy", "stop wasting", "hand it over", "give me your", "just donate", "donate now",
                 "donate. now", "you have to donate", "you must donate", "shame on you", "what's wrong with you",
                 "useless", "idiot", "stingy")


@functools.lru_cache(maxsize=1 << 14)
def pressured(text: str) -> bool:
    """Whether a persuader's turn pressures (a demand or an insult of PRESSURE_CUES)."""
    low = text.lower()
    return any(has_cue(low, c) for c in PRESSURE_CUES)


def hear(text: str) -> list[str]:
    """The strategies (and `ask`) a scripted persuadee hears in a persuader's turn, in LABELS order."""
    return list(_heard(text))


@functools.lru_cache(maxsize=1 << 14)   # a persuadee's wish re-reads every earlier turn of its game at each reply
def _heard(text: str) -> tuple[str, ...]:
    low = text.lower()
    return tuple(s for s in LABELS[:-1] if any(has_cue(low, c) for c in CUES[s]))


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    """A turn's sentences (the annotation labels sentences, not turns)."""
    return [s for s in (x.strip() for x in _SENTENCE.split(text)) if s]


def strategy_labels(turns: Sequence[str], classifier: StrategyClassifier | None = None) -> list[str]:
    """The strategy of every sentence of `turns`, in order: the classifier's label (fitted on the human dialogues:
    `StrategyClassifier`), or without one the cue lexicon's first cue (`hear`; "other" where it hears none)."""
    if classifier is not None:
        return [label for labels in classifier.label_turns(turns) for label in labels]
    return [(hear(s) or ["other"])[0] for t in turns for s in split_sentences(t)]


def label_of(annotation: str) -> str:
    """The classifier's label of an annotation label (er_label_1): a strategy, `ask` or `other`."""
    return annotation if annotation in STRATEGIES else "ask" if annotation in ASK_LABELS else "other"


class StrategyClassifier:
    """A text classifier of persuader sentences into LABELS: TF-IDF word 1-2 grams and character 2-4 grams, and a
    multinomial logistic regression, fit on the annotated sentences of Persuasion for Good.

        clf = StrategyClassifier().fit(records)          # P4GRecords; the annotated ones are used
        clf.report                                        # held-out accuracy and macro-F1 (20% of dialogues)
        clf.predict(["Imagine a child without food."])    # ['emotion-appeal']

    With role="persuadee" it labels persuadee sentences with the annotation's persuadee dialogue acts (ee_label_1,
    as annotated: agree-donation, ask-org-info, positive-reaction-to-donation, ...): the acts whose entropy measures
    how spread a simulated persuadee's replies are.
    """

    def __init__(self, C: float = 4.0, seed: int = 0, role: str = "persuader"):
        if role not in ("persuader", "persuadee"):
            raise ValueError(f"role={role!r}: the annotation labels the persuader's or the persuadee's sentences")
        self.C, self.seed, self.role, self.model, self.report = C, seed, role, None, {}

    def _pipeline(self):
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline, make_union

        return make_pipeline(
            make_union(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2),
                       TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True, min_df=3)),
            LogisticRegression(C=self.C, max_iter=2000))

    def examples(self, records) -> tuple[list[str], list[str], list[str]]:
        """(sentences, labels, dialogue ids) of the annotated records' sentences of this classifier's role."""
        if self.role == "persuader":
            rows = [(text, label_of(label), r.id) for r in records if r.sentences for _, text, label in r.sentences]
        else:
            rows = [(text, label, r.id) for r in records if r.responses for _, text, label in r.responses]
        if not rows:
            raise ValueError("no annotated dialogues among the records (300_dialog.csv is needed)")
        texts, labels, ids = zip(*rows)
        return list(texts), list(labels), list(ids)

    def fit(self, records, held_out: float = 0.2) -> StrategyClassifier:
        """Fit on the annotated records; first measure held-out accuracy with `held_out` of the dialogues left out
        (split by dialogue, seeded), then refit on all of them."""
        from sklearn.metrics import accuracy_score, f1_score

        texts, labels, ids = self.examples(records)
        dialogues = sorted(set(ids))
        random.Random(self.seed).shuffle(dialogues)
        test = set(dialogues[:int(round(held_out * len(dialogues)))])
        tr = [i for i, d in enumerate(ids) if d not in test]
        te = [i for i, d in enumerate(ids) if d in test]
        if te:
            model = self._pipeline().fit([texts[i] for i in tr], [labels[i] for i in tr])
            pred, true = model.predict([texts[i] for i in te]), [labels[i] for i in te]
            majority = max(set(labels), key=[labels[i] for i in tr].count)
            self.report = {"sentences": len(texts), "dialogues": len(dialogues), "held_out_dialogues": len(test),
                           "accuracy": float(accuracy_score(true, pred)),
                           "macro_f1": float(f1_score(true, pred, average="macro")),
                           "majority_accuracy": float(np.mean([t == majority for t in true]))}
        self.model = self._pipeline().fit(texts, labels)
        return self

    def __str__(self) -> str:
        """Its held-out scores in a line (after `fit`)."""
        r = self.report
        if not r:
            return f"{self.role} classifier (not measured on held-out dialogues)"
        return (f"{self.role} classifier: accuracy {r['accuracy']:.3f} (majority label {r['majority_accuracy']:.3f}), "
                f"macro-F1 {r['macro_f1']:.3f} on {r['held_out_dialogues']} held-out dialogues of {r['dialogues']} "
                f"({r['sentences']} sentences)")

    def predict(self, sentences: Sequence[str]) -> list[str]:
        if self.model is None:
            raise RuntimeError("StrategyClassifier is not fitted: call fit(records) first")
        return list(self.model.predict(list(sentences))) if len(sentences) else []

    def label_turns(self, turns: Sequence[str]) -> list[list[str]]:
        """Per turn (of this classifier's role), the labels of its sentences."""
        sents = [split_sentences(t) for t in turns]
        flat = self.predict([s for ss in sents for s in ss])
        out, i = [], 0
        for ss in sents:
            out.append(flat[i:i + len(ss)])
            i += len(ss)
        return out


def fit_human_response(records, C: float = 0.3, min_count: int = 20) -> dict:
    """What the human data say about persuadees (the constants of `personas.HUMAN_FIT`):

    - intercept, beta: a logistic regression (L2, inverse strength C) of "the persuadee gave" on which STRATEGIES
      the persuader used at least once, over the annotated dialogues: the log-odds of giving, and the mean
      association of each strategy with giving (observational: persuaders choose strategies by how the talk goes);
    - amounts: the share of each donated amount among the donors of all dialogues whose recorded donation lies in
      (0, payment] (amounts given at least `min_count` times; a few records above the $2 payment are left out);
    - n, rate: annotated dialogues used and the share of them with a donation.
    """
    from sklearn.linear_model import LogisticRegression

    annotated = [r for r in records if r.sentences and r.donation is not None]
    if not annotated:
        raise ValueError("no annotated dialogues with a donation among the records (300_dialog.csv is needed)")
    X = np.array([[any(label == s for _, _, label in r.sentences) for s in STRATEGIES] for r in annotated], float)
    y = np.array([r.donation > 0 for r in annotated])
    model = LogisticRegression(C=C, max_iter=2000).fit(X, y)
    given = [round(r.raw_donation, 2) for r in records if r.raw_donation is not None and 0 < r.raw_donation <= 2]
    counts = {a: given.count(a) for a in sorted(set(given))}
    kept = {a: c for a, c in counts.items() if c >= min_count}
    return {"intercept": round(float(model.intercept_[0]), 2),
            "beta": {s: round(float(b), 2) for s, b in zip(STRATEGIES, model.coef_[0])},
            "amounts": {a: round(c / sum(kept.values()), 3) for a, c in kept.items()},
            "n": len(annotated), "rate": round(float(y.mean()), 3)}
