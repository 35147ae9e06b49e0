"""What an utterance does socially: a cue lexicon of dialogue acts, read by the game's relationship rules, the
scripted partners and the rule-based judge alike.

    hear("hi! i know you are cold too. could you share the blanket?", scene)
    -> ['greet', 'concern', 'ask']

ACTS are matched on lower-cased text, a cue at word boundaries; `concern` is scene-specific: the utterance names
one of the scene's `cues` (the partner's goal) or says its `ack`.
"""
from __future__ import annotations

from functools import lru_cache

from dialogrl.envs.social.scenes import Scene
from dialogrl.game import has_cue

CUES: dict[str, tuple[str, ...]] = {
    "greet": ("hi", "hello", "hey", "good morning", "good evening"),
    "rapport": ("how are you", "how have you been", "good to see you", "nice to see you", "how was your",
                "hope you are", "hope you're", "you look", "i missed", "great to see"),
    "appreciate": ("thank", "thanks", "appreciate", "grateful", "you're the best", "kind of you", "means a lot"),
    "empathy": ("i understand", "i hear you", "that makes sense", "i see why", "must be hard", "sorry to hear",
                "i get it", "fair enough", "i know you", "i know that", "i know how", "i know it", "i know your",
                "i know those"),
    "reason": ("because", "since", "the reason", "so that", "it would help", "i need it", "i really need",
               "it matters"),
    "offer": ("in return", "make it up", "i can help you", "i'll pay", "i will pay", "i'll cover", "how about i",
              "what if i", "i promise", "i'll owe you", "i'll return", "i will return", "i'll bring"),
    "ask": ("could you", "would you", "can you", "will you", "would it be ok", "please", "i need you to",
            "would you mind", "could i", "can i", "may i", "let me"),
    "pressure": ("you have to", "you must", "you owe me", "just do it", "come on", "stop being", "don't be so",
                 "or else", "i insist", "right now", "no excuses", "you better", "last chance"),
    "insult": ("selfish", "stupid", "ridiculous", "lazy", "pathetic", "useless", "rude"),
    "apology": ("sorry", "apologize", "apologise", "my bad"),
    "farewell": ("bye", "see you", "take care", "talk soon", "have a good"),
}
ACTS: tuple[str, ...] = tuple(CUES) + ("concern",)


def hear(text: str, scene: Scene | None = None) -> list[str]:
    """The acts of one utterance, in ACTS order; `concern` needs the scene. (Cached: the rules, the partners and
    the judge read each turn many times.)"""
    return list(_hear(text, scene))


@lru_cache(maxsize=1 << 16)
def _hear(text: str, scene: Scene | None) -> tuple[str, ...]:
    low = text.lower()
    acts = [a for a, cues in CUES.items() if any(has_cue(low, c, before="'") for c in cues)]
    if scene is not None and (scene.ack in low or any(has_cue(low, c, whole=False) for c in scene.cues)):
        acts.append("concern")
    return tuple(acts)
