"""The agents wing: every agent that speaks with a language model, beside the decoding engines they share.

The contracts (`Agent`, `StreamingAgent`, `ActRequest`, `Utterance`, `Population`) are in `dialogrl.game`; scripted
counterparts are each game's (`dialogrl.envs.<game>.personas`). Here:

    lm.py            LMAgent: a role played by a causal LM (one LoRA adapter of it, or the base), decoded by the
                     lean engine or transformers; VerbalizedSampling: a simulator that writes k candidate replies with
                     probabilities and answers with one drawn from them (the format in `dialogrl.verbalized`)
    counterpart.py   LMCounterpart: a pretrained model prompted into a role, deciding by calibrated scores of its
                     answers (`decision_scores`): the held-out counterparts that respond
    vllm_engine.py   VLLMAgent over VLLMEngine: the same agent decoded by vLLM (optional; TrainConfig.engine="vllm")
    sampling.py      the decoding loop shared by the agents of one model (one batch a step, KV caches per row)
    fastdecode.py    the lean decoder: the model's forward without transformers' per-step overhead, and the packed
                     forward of the update (`hidden`)

A trainer builds its agents through one factory (`rl.trainer.Trainer.lm_agent`), so its engine and temperature reach
every agent on the trained model. Adding a counterpart kind: lib/dialogrl/README.md, "Adding a counterpart kind".
"""
from dialogrl.agents.counterpart import LMCounterpart, decision_scores
from dialogrl.agents.lm import LMAgent, VerbalizedSampling
from dialogrl.game import ActRequest, Agent, Population, StreamingAgent, Utterance
from dialogrl.verbalized import VS_MODES, parse_vs, vs_answer, vs_messages

__all__ = ["LMAgent", "VerbalizedSampling", "LMCounterpart", "decision_scores", "parse_vs", "vs_answer", "vs_messages",
           "VS_MODES", "ActRequest", "Agent", "Population", "StreamingAgent", "Utterance"]
