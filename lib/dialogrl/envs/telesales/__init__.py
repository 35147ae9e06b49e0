"""Vehicle TeleSales: the rules (task.py), scripted sellers and buyers (personas.py) and the warm-start corpus
(corpus.py).

The corpus plays games through the rollout engine, so import it by its path: `dialogrl.envs.telesales.corpus`.
"""
from dialogrl.envs.telesales.personas import (
                                              ALL_BUYERS,
                                              BUYER_PERSONAS,
                                              SELLER_PERSONAS,
                                              UNSEEN_BUYERS,
                                              AnchoredBuyer,
                                              BuyerPersona,
                                              ProbeSeller,
                                              ScriptedAgent,
                                              SellerPersona,
                                              hear,
                                              listen,
                                              population,
                                              probe,
                                              traits,
)
from dialogrl.envs.telesales.task import (
                                              BUYER_PROFILES,
                                              CATALOG,
                                              FEATURES,
                                              MAX_PRICE,
                                              SELLER_GOALS,
                                              TYPES,
                                              TelesalesScenario,
                                              Vehicle,
                                              VehicleTeleSales,
                                              buy_marker,
                                              feasible,
                                              fits,
                                              good_sale,
                                              offer_marker,
                                              parse_marker,
                                              sample_scenario,
)

TASK = VehicleTeleSales
TINY_MODELS = {  # see envs/dealnodeal/__init__.py
    "tiny-telesales": dict(
        corpus="dialogrl.envs.telesales.corpus:telesales_corpus",
        corpus_kwargs={"n_dialogues": 7000, "seed": 0, "views": "one"},  # ~2.3M tokens, as many as tiny-dond's
        # three passes: after one (loss 0.80) the buyer bought offers that lacked its must-haves as often as those
        # that had them, its view's notes notwithstanding; the `scattershot` seller's offers (any vehicle, any
        # need) teach it to read the note rather than the price (papers/04, "Counterparts that respond")
        config={"epochs": 3.0},
        description="Vehicle TeleSales (seller and buyer), warm-started on scripted persona dialogues"),
}

__all__ = ["TASK", "TINY_MODELS",
           "ALL_BUYERS", "AnchoredBuyer", "BUYER_PERSONAS", "SELLER_PERSONAS", "UNSEEN_BUYERS", "BuyerPersona",
           "SellerPersona", "ProbeSeller", "ScriptedAgent", "hear", "listen", "population", "probe", "traits",
           "BUYER_PROFILES", "CATALOG", "FEATURES", "MAX_PRICE", "SELLER_GOALS", "TYPES", "TelesalesScenario",
           "Vehicle", "VehicleTeleSales", "buy_marker", "feasible", "fits", "good_sale", "offer_marker", "parse_marker",
           "sample_scenario"]
