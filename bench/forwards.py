"""Sequential forward passes of each notebook's rollouts, against the ideal: their longest game played alone.

    python bench/forwards.py [--games 32] [--max-new-tokens 48] [--vs-max-new-tokens 200] [--engine hf|lean]

On one device the decoding engines' forward passes run one after another, and at these batch sizes each costs about
the same whatever the number of rows: their number, not the number of games, sets a rollout's decoding time. A batch
of games can do no better than the longest of them played alone (every one of its turns' tokens, each after the
last); the ratio says how close the engine comes. The counter is the engines' own (`dialogrl.agents.sampling.FORWARDS`:
every prefill and decoding step, and the selection phase's scoring passes), so a model call that makes every other
game wait shows in it.

One training step's rollout per notebook, at reduced size, with the agents its `gpu` profile gives the roles, the
embedded models standing in for the hub ones (the counts depend on turn lengths, not on model size):
  01  Deal or No Deal: the policy (LoRA) against an LM simulator (interactive RL)
  02  social scenes: the agent (LoRA) against an LM partner, then the LLM judge on every agent turn of the step
      (`ProcessReward.prepare`: one batch)
  03  persuasion: the persuader (LoRA) against a Verbalized Sampling simulator, and against a population of three
      LM simulators (the ensemble)
  04  TeleSales: seller and buyer, each its own LoRA adapter of one model (IB-RL's joint rollout)
On the HF engine (`--engine hf`, the default: the engine of a GPU or of bf16 weights) the agents of one model share
one batch, each row through its own adapter (`sampling.SharedBatch`); on the lean engine (fp32 on the CPU) each agent
has its own batch, so two LM agents that alternate need up to two passes per round of the longest game. The last
lines are a markdown table (notebook, agents, games, passes, the longest game alone, ratio).
"""
from __future__ import annotations

import argparse

from dialogrl.agents import LMAgent, VerbalizedSampling
from dialogrl.agents.sampling import counting_forwards
from dialogrl.envs import DealOrNoDeal, PersuasionForGood, SocialScenes, VehicleTeleSales
from dialogrl.envs.social.judge import RuleJudge
from dialogrl.game import Population
from dialogrl.models import load_model
from dialogrl.rewards import LLMJudge, ProcessReward
from dialogrl.rollout import play
from dialogrl.seeds import stream_seed
from dialogrl.tiny import warm_start


def setups(args):
    """name -> (who plays, task, agents(): fresh agents for a rollout, after(episodes, agents): the step's later
    work)."""
    def lm(model, tok, adapter=None, name=None, tokens=args.max_new_tokens, temperature=1.0):
        return LMAgent(model, tok, adapter=adapter, name=name, max_new_tokens=tokens, temperature=temperature,
                       lean=args.engine == "lean")

    dond = load_model(warm_start("tiny-dond"), adapters=["policy"], device="cpu")
    social = load_model(warm_start("tiny-social"), adapters=["policy"], device="cpu")
    persuasion = load_model(warm_start("tiny-persuasion"), adapters=["policy"], device="cpu")
    telesales = load_model(warm_start("tiny-telesales"), adapters=["seller", "buyer"], device="cpu")
    social_task = SocialScenes()

    def judge(episodes, agents):
        process = ProcessReward(LLMJudge(lm(*social, name="judge", tokens=args.judge_max_new_tokens,
                                            temperature=0.2), fallback=RuleJudge()), social_task)
        process.prepare(episodes)

    return {
        "01": ("policy vs LM simulator", DealOrNoDeal(),
               lambda: {"A": lm(*dond, "policy"), "B": lm(*dond, name="simulator")}, None),
        "02": ("agent vs LM partner, then the LLM judge", social_task,
               lambda: {"agent": lm(*social, "policy"), "partner": lm(*social, name="partner")}, judge),
        "03 vs": ("persuader vs Verbalized Sampling", PersuasionForGood(),
                  lambda: {"persuader": lm(*persuasion, "policy"),
                           "persuadee": VerbalizedSampling(lm(*persuasion, name="vs", tokens=args.vs_max_new_tokens,
                                                              temperature=0.7), k=5)}, None),
        "03 ensemble": ("persuader vs a population of 3 LM simulators", PersuasionForGood(),
                        lambda: {"persuader": lm(*persuasion, "policy"),
                                 "persuadee": Population({f"sim-{j}": lm(*persuasion, name=f"sim-{j}",
                                                                         temperature=0.3 + 0.3 * j)
                                                          for j in range(3)})}, None),
        "04": ("seller and buyer, two adapters of one model", VehicleTeleSales(),
               lambda: {"seller": lm(*telesales, "seller"), "buyer": lm(*telesales, "buyer")}, None),
    }


def count(task, agents, after, scenarios, seeds) -> int:
    made = agents()
    with counting_forwards() as c:
        episodes = play(task, made, scenarios, seeds=seeds)
        if after is not None:
            after(episodes, made)
    return c.n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", type=int, default=32, help="games in the step's rollout (default 32)")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="tokens per turn (default 48)")
    ap.add_argument("--vs-max-new-tokens", type=int, default=200, help="tokens per VS answer (default 200)")
    ap.add_argument("--judge-max-new-tokens", type=int, default=200, help="tokens per judge answer (default 200)")
    ap.add_argument("--only", nargs="*", help="setups to run (default: all)")
    ap.add_argument("--engine", default="hf", choices=["hf", "lean"],
                    help="hf: the GPU's decoding engine, agents of one model in one batch (default); lean: the CPU's")
    args = ap.parse_args()
    rows = []
    for name, (who, task, agents, after) in setups(args).items():
        if args.only and name not in args.only:
            continue
        scenarios = task.sample_scenarios(args.games, seed=stream_seed("eval-scenarios", 0, name))
        seeds = [stream_seed("train-games", 0, 0, i) for i in range(len(scenarios))]
        batched = count(task, agents, after, scenarios, seeds)
        alone = max(count(task, agents, after, [sc], [sd]) for sc, sd in zip(scenarios, seeds))
        rows.append((name, who, len(scenarios), batched, alone))
        print(f"{name}: {batched} passes for {len(scenarios)} games, the longest alone {alone}: "
              f"{batched / alone:.2f}x", flush=True)
    print("\n| notebook | agents | games | forward passes | longest game alone | ratio |\n"
          "|---|---|---:|---:|---:|---:|")
    for name, who, n, batched, alone in rows:
        print(f"| {name} | {who} | {n} | {batched} | {alone} | {batched / alone:.2f} |")


if __name__ == "__main__":
    main()
