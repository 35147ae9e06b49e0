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
                                              SellerPersona,
                                              TelesalesAgent,
                                              hear,
                                              listen,
                                              telesales_population,
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

__all__ = ["ALL_BUYERS", "AnchoredBuyer", "BUYER_PERSONAS", "SELLER_PERSONAS", "UNSEEN_BUYERS", "BuyerPersona",
           "SellerPersona", "TelesalesAgent", "hear", "listen", "telesales_population", "traits", "BUYER_PROFILES",
           "CATALOG", "FEATURES", "MAX_PRICE", "SELLER_GOALS", "TYPES", "TelesalesScenario", "Vehicle",
           "VehicleTeleSales", "buy_marker", "feasible", "fits", "good_sale", "offer_marker", "parse_marker",
           "sample_scenario"]
