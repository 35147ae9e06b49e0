"""Persuasion for Good: the rules (task.py), scripted persuaders and persuadees (personas.py), persuasion strategies
and their classifier (strategies.py) and the warm-start corpus (corpus.py).

The corpus plays games through the rollout engine, so import it by its path: `dialogrl.envs.persuasion.corpus`.
"""
from dialogrl.envs.persuasion.personas import (
    ALL_PERSUADEES,
    HUMAN_FIT,
    PERSUADEE_PERSONAS,
    PERSUADER_PERSONAS,
    UNSEEN_PERSUADEES,
    AttentivePersuadee,
    PersuadeePersona,
    PersuaderPersona,
    PersuasionAgent,
    persuasion_population,
    traits,
)
from dialogrl.envs.persuasion.strategies import LABELS, STRATEGIES, StrategyClassifier, fit_human_response, hear
from dialogrl.envs.persuasion.task import (
    PAYMENT,
    PERSUADEE_PROFILES,
    PersuasionForGood,
    PersuasionScenario,
    donate_marker,
    parse_marker,
    sample_scenario,
)

__all__ = ["ALL_PERSUADEES", "HUMAN_FIT", "AttentivePersuadee", "PERSUADEE_PERSONAS", "PERSUADER_PERSONAS",
           "UNSEEN_PERSUADEES", "PersuadeePersona", "PersuaderPersona", "PersuasionAgent", "persuasion_population",
           "traits", "LABELS", "STRATEGIES",
           "StrategyClassifier", "fit_human_response", "hear", "PAYMENT", "PERSUADEE_PROFILES", "PersuasionForGood",
           "PersuasionScenario", "donate_marker", "parse_marker", "sample_scenario"]
