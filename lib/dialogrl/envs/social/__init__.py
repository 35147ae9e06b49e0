"""Social scenes: the rules (task.py), the scenes (scenes.py), dialogue acts (acts.py), scripted agents and partners
(personas.py), the rule-based process-reward judge (judge.py), the warm-start corpus (corpus.py) and SOTOPIA's
released episodes and character profiles (data.py).

The corpus plays games through the rollout engine, so import it by its path: `dialogrl.envs.social.corpus`.
"""
from dialogrl.envs.social.acts import ACTS, hear
from dialogrl.envs.social.data import SotopiaEpisode, load_sotopia_episodes, load_sotopia_profiles
from dialogrl.envs.social.personas import (
    AGENT_PERSONAS,
    AgentPersona,
    ProbeAgent,
    ScriptedAgent,
    population,
    probe,
    sotopia_partners,
    traits,
)
from dialogrl.envs.social.scenes import ALL_SCENES, HARD_SCENES, TRAIN_SCENES, Scene
from dialogrl.envs.social.task import (
    ALL_PARTNERS,
    PARTNERS,
    UNSEEN_PARTNERS,
    PartnerProfile,
    SocialScenario,
    SocialScenes,
    TermsProfile,
    parse_marker,
    partner_trace,
    profile_from_traits,
    relationship_trace,
)

TASK = SocialScenes
TINY_MODELS = {  # see envs/dealnodeal/__init__.py
    "tiny-social": dict(
        corpus="dialogrl.envs.social.corpus:social_corpus",
        corpus_kwargs={"n_dialogues": 7000, "seed": 0, "views": "one"},
        description="Social scenes (agent and partner), warm-started on scripted persona dialogues over the training "
                    "scenes"),
    "tiny-social-alt": dict(
        corpus="dialogrl.envs.social.corpus:social_corpus",
        # held-out act-reading profiles (heldout: at least MIN_DISTANCE from every training partner); proud and
        # easygoing, its partners before, lie within it (easygoing has pliant's traits exactly)
        corpus_kwargs={"n_dialogues": 7000, "seed": 1, "views": "one", "partners": ["prickly", "earnest"]},
        description="Social scenes from another corpus: the partners are the unseen profiles (notebook 02's held-out "
                    "partner model)"),
}

__all__ = ["TASK", "TINY_MODELS", "SotopiaEpisode", "load_sotopia_episodes", "load_sotopia_profiles",
           "ACTS", "hear", "AGENT_PERSONAS", "AgentPersona", "ProbeAgent", "ScriptedAgent", "population", "probe",
           "sotopia_partners",
           "traits", "ALL_SCENES", "HARD_SCENES", "TRAIN_SCENES", "Scene", "ALL_PARTNERS", "PARTNERS",
           "UNSEEN_PARTNERS", "PartnerProfile", "SocialScenario", "SocialScenes", "TermsProfile", "parse_marker",
           "partner_trace", "profile_from_traits", "relationship_trace"]
