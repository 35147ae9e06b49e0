"""The scenes of the social game: what the agent asks for, what the partner wants, and how much it costs the partner.

A Scene is a request that needs the partner's agreement (the agent's goal) against a concern of the partner's own
(its goal). Two sets, written for this project:

  TRAIN_SCENES  everyday requests (favours, loans, invitations, prices, chores, plans): the warm-start corpus and RL
                training draw these.
  HARD_SCENES   the 14 SOTOPIA-hard scenarios (Zhou et al., ICLR 2024), keyed by their environment ids, each read as
                one request of the side whose goal needs the other's agreement (our paraphrase, not SOTOPIA's text:
                the original scenario and goal texts are read from the `sotopia` data set by
                `social.data.load_sotopia_episodes` where present). Held out from everything: no corpus or training
                run sees them.

Fields: `ask` completes "could you ...?" (the full request), `partial` what a partial agreement grants, `concern`
the partner's goal as its prompt states it, `ack` how an agent acknowledges that goal, `cues` the words that show
an utterance is about the partner's concern (lower case, matched at word starts), `stake` how costly the request is
to the partner (0 easy .. 2 hard; it lowers the partner's wish to agree).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scene:
    name: str
    setting: str
    ask: str
    partial: str
    concern: str
    ack: str
    cues: tuple[str, ...]
    stake: float = 1.0
    hard: bool = False


def _scenes(rows: list[tuple], hard: bool = False) -> dict[str, Scene]:
    return {r[0]: Scene(*r, hard=hard) for r in rows}


TRAIN_SCENES: dict[str, Scene] = _scenes([
    ("shift", "two coworkers in the break room", "cover my shift on saturday", "cover half of my saturday shift",
     "keep your saturday free for your family", "i know your weekends are for your family", ("family", "weekend"),
     1.2),
    ("car", "two neighbours by the driveway", "lend me your car for the weekend", "lend me your car for one day",
     "keep your car safe; you need it on monday", "i know you need the car on monday", ("monday", "safe"), 1.5),
    ("move", "two old friends on the phone", "help me move flats on sunday", "help me for two hours on sunday",
     "rest after a hard week", "i know you had a hard week", ("rest", "hard week", "tired"), 1.0),
    ("notes", "two classmates after a lecture", "share your lecture notes with me", "share the notes of one lecture",
     "keep your notes from being copied word for word", "i won't copy your notes word for word",
     ("copy", "word for word"), 0.4),
    ("price", "a buyer and a seller at a flea market", "sell me the lamp for $20", "sell me the lamp for $25",
     "get at least $30 for the lamp", "i know you want a fair price for it", ("fair price", "worth"), 1.0),
    ("rent", "a tenant and a landlord in the hallway", "let me pay the rent a week late",
     "let me pay half the rent now and half next week", "be paid on time for your own bills",
     "i know you have bills of your own", ("bills", "on time"), 1.3),
    ("trip", "two friends planning the summer", "come with me on a camping trip", "join the trip for one night",
     "save money this summer", "i know you are saving money", ("money", "saving", "cost"), 0.9),
    ("music", "two flatmates in the kitchen", "turn the music down after ten", "turn the music down after eleven",
     "practise for your concert", "i know your concert is coming up", ("concert", "practise"), 0.7),
    ("dog", "two neighbours over the fence", "look after my dog while i travel", "feed my dog once a day",
     "keep your busy week under control", "i know your week is busy", ("busy", "week"), 1.1),
    ("dinner", "two siblings on a video call", "host the family dinner this year", "host the dessert part of dinner",
     "avoid the cost and the work of hosting", "i know hosting is a lot of work", ("work", "cost"), 1.2),
    ("laptop", "two colleagues at their desks", "lend me your laptop for the afternoon",
     "lend me your laptop for an hour", "finish your own report today", "i know you have your report to finish",
     ("report", "finish"), 0.9),
    ("deadline", "a team member and their lead", "give me two more days for the project",
     "give me one more day for the project", "deliver the project to the client on time",
     "i know the client is waiting", ("client", "on time"), 1.3),
    ("garden", "two neighbours at the gate", "share the cost of a new fence", "pay a third of the new fence",
     "spend nothing on the fence this year", "i know money is tight this year", ("money", "tight", "cost"), 1.2),
    ("ride", "two coworkers in the parking lot", "drive me to the airport at six", "drive me to the train station",
     "sleep in after a late shift", "i know you worked late", ("sleep", "late"), 1.0),
    ("book", "two friends at a bookshop cafe", "lend me your signed book", "let me read it at your place",
     "keep your signed copy in perfect shape", "i know that copy means a lot to you", ("signed", "copy"), 0.8),
    ("room", "two flatmates at breakfast", "swap rooms with me for a month", "swap rooms for a week",
     "keep the quiet room for your studies", "i know you need quiet to study", ("quiet", "study"), 1.4),
    ("speech", "two friends before a wedding", "give a speech at my wedding", "say a short toast at my wedding",
     "avoid speaking in front of a crowd", "i know speaking in public makes you nervous", ("nervous", "public"), 1.0),
    ("tools", "two neighbours in a shed", "lend me your power drill", "lend me the drill for an hour",
     "get your drill back in good shape", "i know you want the drill back in good shape", ("shape", "back"), 0.5),
    ("fundraiser", "two parents at a school meeting", "run the bake sale stand with me",
     "bake one tray for the sale", "keep your saturday for your own errands", "i know you have errands on saturday",
     ("errands", "saturday"), 0.9),
    ("gym", "two friends after a workout", "train with me at six every morning", "train with me twice a week",
     "keep your mornings slow", "i know mornings are hard for you", ("morning", "slow"), 1.1),
])

HARD_SCENES: dict[str, Scene] = _scenes([
    ("01H7VFHNNYH3W0VRWVY178K2TK", "two partners on a vacation", "keep sharing the bed tonight",
     "share the bed for part of the night", "sleep well: your back hurts and you need a firmer mattress",
     "i know your back has been hurting", ("back", "sleep", "mattress"), 1.5),
    ("01H7VFHP8AN5643B0NR0NP00VE", "two friends splitting their things when moving out", "let me have the book",
     "give me the book for both balls", "get the items worth most to you; the book is worth most",
     "i know the book matters to you too", ("book", "worth", "points"), 1.6),
    ("01H7VFHNF4G18PC9JHGRC8A1R6", "a homeowner and their cousin's partner who is staying over",
     "move out by the end of the month", "move out within three months",
     "stay in the home: you have nowhere else to go", "i know you have nowhere else to go right now",
     ("nowhere", "place", "stay"), 1.9),
    ("01H7VFHN7WJK7VWVRZZTQ6DX9T", "two friends planning a weekend", "join the weekend trip",
     "join the trip for one day", "keep your other plans this weekend", "i know you have other plans",
     ("plans", "weekend"), 1.4),
    ("01H7VFHNV13MHN97GAH73E3KM8", "two people who dislike the same third person",
     "drop the idea of hurting them", "wait a week before doing anything", "make the third person pay",
     "i know how angry they make you", ("angry", "hate", "pay"), 1.8),
    ("01H7VFHNN7XTR99319DS8KZCQM", "two friends camping on a cold night", "share the only blanket",
     "share the blanket for half the night", "stay warm: you are very cold too", "i know you are cold too",
     ("cold", "warm"), 1.5),
    ("01H7VFHN7A1ZX5KSMT2YN9RXC4", "two friends at a garage sale", "take the vintage record off the sale",
     "hold the record until we ask our friend", "sell the vintage record for good money",
     "i know you were counting on that sale", ("sale", "money", "sell"), 1.6),
    ("01H7VFHPDZVVCDZR3AARA547CY", "two friends at a charity event for children", "donate $500 instead of $200",
     "donate $300", "stay within your $300 budget", "i know you have a budget", ("budget", "afford"), 1.7),
    ("01H7VFHN5WVC5HKKVBHZBA553R", "two friends playing a video game late", "play five more minutes",
     "play two more minutes", "stop now: you are tired and need to sleep", "i know you are tired",
     ("tired", "sleep", "bed"), 1.3),
    ("01H7VFHPQQQY6H4DNC6NBQ8XTG", "a buyer and a seller of a new phone listed at $650", "sell me the phone for $454",
     "sell me the phone for $530", "sell the phone for at least $610", "i know you want a good price",
     ("price", "worth", "loss"), 1.8),
    ("01H7VFHQ11NAMZS4A2RDGDB01V", "a buyer and a seller of an antique table listed at $60",
     "sell me the table for $30", "sell me the table for $45", "sell the table for at least $58",
     "i know it is a fine antique", ("antique", "worth", "price"), 1.8),
    ("01H7VFHPSWGDGEYRP63H2DJKV0", "a buyer and a seller of an item tracker listed at $20",
     "sell me the tracker for $14", "sell me the tracker for $17", "sell at the listed price; it is non-negotiable",
     "i know the price is fixed", ("price", "fixed", "listed"), 1.7),
    ("01H7VFHN9W0WAFZCBT09PKJJNK", "two people sharing a room with expensive stationery",
     "lend me some stationery for my project", "lend me one pen for my project",
     "keep your expensive stationery from damage", "i know those items are expensive",
     ("expensive", "damage", "careful"), 1.5),
    ("01H7VFHPS5WJW2694R1MNC8JFY", "a buyer and a seller of a dresser set listed at $200",
     "sell me the dresser set for $152", "sell me the set for $165", "sell the set for at least $172",
     "i know the set is from a good brand", ("brand", "price", "worth"), 1.6),
], hard=True)

ALL_SCENES: dict[str, Scene] = {**TRAIN_SCENES, **HARD_SCENES}
