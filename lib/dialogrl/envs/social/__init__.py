"""Social scenes: the rules (task.py), the scenes (scenes.py), dialogue acts (acts.py), scripted agents and partners
(personas.py), the rule-based process-reward judge (judge.py) and the warm-start corpus (corpus.py).

The corpus plays games through the rollout engine, so import it by its path: `dialogrl.envs.social.corpus`.
"""
from dialogrl.envs.social.acts import ACTS, hear
from dialogrl.envs.social.personas import (
    AGENT_PERSONAS,
    AgentPersona,
    SocialAgent,
    social_population,
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

__all__ = ["ACTS", "hear", "AGENT_PERSONAS", "AgentPersona", "SocialAgent", "social_population", "sotopia_partners",
           "traits", "ALL_SCENES", "HARD_SCENES", "TRAIN_SCENES", "Scene", "ALL_PARTNERS", "PARTNERS",
           "UNSEEN_PARTNERS", "PartnerProfile", "SocialScenario", "SocialScenes", "TermsProfile", "parse_marker",
           "partner_trace", "profile_from_traits", "relationship_trace"]
