"""Deal or No Deal: the rules (task.py), scripted negotiators (personas.py), the warm-start corpus (corpus.py), the
learned selection step of the selection protocol (selection.py), a simulated user's learned accept / hold-out decision
(acceptance.py), how a role behaves (behaviour.py) and the human dialogues (data.py).

The corpus plays games through the rollout engine, so import it by its path: `dialogrl.envs.dealnodeal.corpus`.
"""
from dialogrl.envs.dealnodeal.acceptance import (
    AcceptanceModel,
    DecidingUser,
    compliance,
    decision_conversations,
)
from dialogrl.envs.dealnodeal.behaviour import (
    BEHAVIOUR_SCALES,
    DECISION_BINS,
    behaviour_stats,
    decisions,
)
from dialogrl.envs.dealnodeal.data import DondRecord, dond_human_corpus, load_dond, replay
from dialogrl.envs.dealnodeal.personas import (
                                               ALL_PERSONAS,
                                               PERSONAS,
                                               UNSEEN_PERSONAS,
                                               Persona,
                                               ProbeProposer,
                                               Reciprocal,
                                               ScriptedAgent,
                                               aspiration,
                                               population,
                                               probe,
                                               traits,
)
from dialogrl.envs.dealnodeal.selection import SelectionClassifier
from dialogrl.envs.dealnodeal.task import (
                                               ITEMS,
                                               POOL_FREQUENCIES,
                                               PROTOCOLS,
                                               SELECTION_TOKEN,
                                               TOTAL_VALUE,
                                               DealOrNoDeal,
                                               DondScenario,
                                               all_splits,
                                               complement,
                                               count_vectors,
                                               describe,
                                               is_pareto_optimal,
                                               marker,
                                               parse_offer,
                                               parse_selection,
                                               sample_scenario,
                                               split_value,
                                               valid_values,
                                               value_pairs,
                                               value_vectors,
)

TASK = DealOrNoDeal
# The game's embedded models (dialogrl.tiny.TINY_MODELS collects every game's): the corpus function by its path,
# its arguments, TinyConfig fields that differ from the defaults, and a line that says what the model is
TINY_MODELS = {
    "tiny-dond": dict(
        corpus="dialogrl.envs.dealnodeal.corpus:dond_corpus",
        corpus_kwargs={"n_dialogues": 9000, "seed": 0, "views": "one"},
        description="Deal or No Deal (offer protocol), warm-started on scripted persona dialogues"),
    "tiny-dond-human": dict(
        corpus="dialogrl.envs.dealnodeal.data:dond_human_corpus",
        corpus_kwargs={"source": "mikelewis0/deal_or_no_dialog"},  # or a local copy: build-tiny ... --data PATH
        config={"epochs": 2.0},
        description="Deal or No Deal (selection protocol), warm-started on the 5,808 human dialogues"),
}

__all__ = ["TASK", "TINY_MODELS", "AcceptanceModel", "DecidingUser", "compliance", "decision_conversations",
           "BEHAVIOUR_SCALES", "DECISION_BINS", "behaviour_stats", "decisions", "DondRecord",
           "dond_human_corpus", "load_dond", "replay",
           "ALL_PERSONAS", "PERSONAS", "UNSEEN_PERSONAS", "Persona", "ProbeProposer", "Reciprocal", "ScriptedAgent",
           "aspiration", "population", "probe", "traits", "SelectionClassifier", "ITEMS", "POOL_FREQUENCIES",
           "PROTOCOLS", "SELECTION_TOKEN", "TOTAL_VALUE", "DealOrNoDeal", "DondScenario", "all_splits", "complement",
           "count_vectors", "describe", "is_pareto_optimal", "marker", "parse_offer", "parse_selection",
           "sample_scenario", "split_value", "valid_values", "value_pairs", "value_vectors"]
