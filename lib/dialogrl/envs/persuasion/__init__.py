"""Persuasion for Good: the rules (task.py), scripted persuaders and persuadees (personas.py), persuasion strategies
and their classifier (strategies.py), the warm-start corpus (corpus.py) and the human dialogues (data.py).

The corpus plays games through the rollout engine, so import it by its path: `dialogrl.envs.persuasion.corpus`.
"""
from dialogrl.envs.persuasion.data import P4GRecord, load_p4g, p4g_human_corpus
from dialogrl.envs.persuasion.personas import (
    ALL_PERSUADEES,
    HUMAN_FIT,
    PERSUADEE_PERSONAS,
    PERSUADER_PERSONAS,
    UNSEEN_PERSUADEES,
    AttentivePersuadee,
    PersuadeePersona,
    PersuaderPersona,
    RudePersuader,
    ScriptedAgent,
    population,
    probe,
    reference_persuaders,
    traits,
)
from dialogrl.envs.persuasion.strategies import (
    LABELS,
    STRATEGIES,
    StrategyClassifier,
    fit_human_response,
    hear,
    strategy_labels,
)
from dialogrl.envs.persuasion.task import (
    PAYMENT,
    PERSUADEE_PROFILES,
    PersuasionForGood,
    PersuasionScenario,
    donate_marker,
    parse_marker,
    sample_scenario,
)

TASK = PersuasionForGood
TINY_MODELS = {  # see envs/dealnodeal/__init__.py
    "tiny-persuasion": dict(
        corpus="dialogrl.envs.persuasion.corpus:persuasion_corpus",
        corpus_kwargs={"n_dialogues": 8000, "seed": 0, "views": "one", "vs_share": 0.5},
        # three passes and half the persuadee's conversations in the VS format. With a quarter and one pass the model
        # wrote an unusable VS answer for 93% of turns after two retries (k wrong, broken JSON); with two passes, 14%
        # at temperature 0.3 and 43% at 1.0 (100 games against the balanced persuader), but the persuadee of builds
        # 1 and 3 hardly told a good persuader from a rude one (+0.16, +0.24: papers/03); with three, every build
        # does (+0.44 to +0.87 at temperature 0.3, 100 paired games) and the VS answer is unusable after two retries
        # for 0-5% of turns at temperature 0.3, 0.5-5% at 0.7 and 4-9% at 1.0 (builds 0-3, same 100 games)
        config={"epochs": 3.0},
        description="Persuasion for Good (persuader and persuadee, half the persuadee's conversations as Verbalized "
                    "Sampling answers), warm-started on scripted persona dialogues"),
    "tiny-persuasion-human": dict(
        corpus="dialogrl.envs.persuasion.data:p4g_human_corpus",
        corpus_kwargs={"source": None},  # a local copy of the release: build-tiny ... --data PATH
        config={"epochs": 3.0},
        description="Persuasion for Good persuadee, warm-started on the 1,017 human persuadees (notebook 03's "
                    "held-out human counterpart)"),
}

__all__ = ["TASK", "TINY_MODELS", "P4GRecord", "load_p4g", "p4g_human_corpus",
           "ALL_PERSUADEES", "HUMAN_FIT", "AttentivePersuadee", "PERSUADEE_PERSONAS", "PERSUADER_PERSONAS",
           "UNSEEN_PERSUADEES", "PersuadeePersona", "PersuaderPersona", "RudePersuader", "ScriptedAgent",
           "population", "probe", "reference_persuaders", "traits", "LABELS", "STRATEGIES", "StrategyClassifier",
           "fit_human_response", "hear", "strategy_labels", "PAYMENT", "PERSUADEE_PROFILES", "PersuasionForGood",
           "PersuasionScenario", "donate_marker", "parse_marker", "sample_scenario"]
