"""What an utterance commits to concretely: the terms a partner of the `concrete-terms` family reads (numbers and
amounts, clock times, days, durations), and whether a turn puts the scene's request.

    concrete_terms("i can have it back by 6pm on friday, and i'll pay $20.", scene)
    -> {'6pm', 'friday', '$20'}

A lexicon of its own, apart from acts.py's cue lexicon (which the game's relationship rules, the act-reading
partners and the rule judge read): the judge's criteria test none of these terms, so a claim read against a partner
that reads only these is not a claim about what the judge rewards. Terms the scene's own texts already hold (its
setting, request, partial request, the partner's goal and its acknowledgement) do not count: restating the request
commits to nothing new.
"""
from __future__ import annotations

import re
from functools import lru_cache

from dialogrl.envs.social.scenes import Scene

_NUMBER = (r"[0-9]+(?:[.,:][0-9]+)?|a couple of|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
           r"fifteen|twenty|thirty|forty|fifty|hundred|half an?|an?")
_UNIT = r"minutes?|hours?|days?|nights?|weeks?|months?|dollars?|bucks|percent|am|pm|o'clock|%|k"
_DAY = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|tonight|noon|midnight"
# an amount ($20), a number with its unit (two hours, 6pm, 3 days), a bare number of digits (by 6), or a day
_TERM = re.compile(rf"(?<![a-z0-9$])(\$\s?[0-9]+(?:[.,][0-9]+)?|(?:{_NUMBER})\s?(?:{_UNIT})(?![a-z])|[0-9]+|{_DAY})"
                   r"(?![a-z0-9])", re.ASCII)
_WORD = re.compile(r"[a-z]+")


def concrete_terms(text: str, scene: Scene | None = None) -> set[str]:
    """The concrete terms of one utterance (lower case, spaces squeezed), less those the scene's texts hold."""
    return set(_terms(text.lower())) - (_scene_terms(scene) if scene is not None else set())


@lru_cache(maxsize=1 << 16)
def _terms(low: str) -> tuple[str, ...]:
    return tuple(sorted({" ".join(m.group(1).split()) for m in _TERM.finditer(low)}))


@lru_cache(maxsize=256)
def _scene_terms(scene: Scene) -> set[str]:
    return set(_terms(" . ".join((scene.setting, scene.ask, scene.partial, scene.concern, scene.ack)).lower()))


def names_request(text: str, scene: Scene) -> bool:
    """Whether a turn puts the scene's request: a question that names one of the request's words (of 4+ letters,
    'your' and 'with' aside)."""
    low = text.lower()
    words = {w for w in _WORD.findall(scene.ask) if len(w) >= 4 and w not in ("your", "with")}
    return "?" in low and bool(words & set(_WORD.findall(low)))
