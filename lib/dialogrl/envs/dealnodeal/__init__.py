"""Deal or No Deal: the rules (task.py), scripted negotiators (personas.py), the warm-start corpus (corpus.py) and the
learned selection step of the selection protocol (selection.py).

The corpus plays games through the rollout engine, so import it by its path: `dialogrl.envs.dealnodeal.corpus`.
"""
from dialogrl.envs.dealnodeal.personas import (
                                               ALL_PERSONAS,
                                               PERSONAS,
                                               UNSEEN_PERSONAS,
                                               Persona,
                                               Reciprocal,
                                               ScriptedAgent,
                                               aspiration,
                                               persona_population,
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

__all__ = ["ALL_PERSONAS", "PERSONAS", "UNSEEN_PERSONAS", "Persona", "Reciprocal", "ScriptedAgent", "aspiration",
           "persona_population", "traits", "SelectionClassifier", "ITEMS", "POOL_FREQUENCIES", "PROTOCOLS",
           "SELECTION_TOKEN", "TOTAL_VALUE", "DealOrNoDeal", "DondScenario", "all_splits", "complement",
           "count_vectors", "describe", "is_pareto_optimal", "marker", "parse_offer", "parse_selection",
           "sample_scenario", "split_value", "valid_values", "value_pairs", "value_vectors"]
