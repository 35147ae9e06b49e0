"""TRL interop: train ONE role of a multi-turn game with TRL's own `GRPOTrainer` loop.

    dataset = scenario_dataset(task, n=256, seed=0, role="A")
    trainer = grpo_trainer_class()(model, reward_funcs=outcome_reward, train_dataset=dataset,
                                   args=GRPOConfig(..., num_generations=8),
                                   rollout_func=make_rollout_func(task, role="A", counterpart=ScriptedAgent("fair")))
    trainer.train()

`grpo_trainer_class()` (from `dialogrl.trl_compat`) is TRL's GRPOTrainer on a GPU with Triton, else a subclass that
computes the per-token log-probs from plain logits (TRL 1.15 computes them only with a Triton kernel, so its
GRPOTrainer fails on CPU).

TRL calls `rollout_func(prompts, trainer)` once per generation batch. `prompts` are the batch's dataset rows'
"prompt" column, each row already repeated `num_generations` times in a row by TRL's sampler (the GRPO group), and
nothing else of the row. So a prompt must itself name its scenario: `scenario_dataset` writes the trained role's
view of the fresh game (its first prompt when it speaks first) as the prompt, and puts the scenario's address on
the first message as an extra key, `"scenario"` (a JSON string {task, role, seed, n, index}: the scenario is
`task.sample_scenarios(n, seed)[index]`). Chat templates read only "role" and "content", so the key is invisible
to the model. The rollout plays one whole game per prompt with `dialogrl.rollout.play`: the trained role is an
LMAgent sampling from the model TRL trains, as it is (whatever adapter is active), the other roles are the given
agents. Each game then becomes ONE sequence, the trained role's last view plus its last completion:

    prompt_ids      its first turn's prompt ids p_1
    completion_ids  p_k[len(p_1):] + c_k          (p_k, c_k: its last turn's prompt and sampled completion)
    env_mask        1 on its own sampled tokens (each c_j where it sits in p_k), 0 on the counterpart's turns and on
                    the chat-template tokens between turns
    logprobs        the sampling log-probs on its own tokens, 0 elsewhere

This is token-in/token-out only if each turn's prompt extends the previous turn's prompt and completion:
p_{j+1} = p_j + c_j + (template and counterpart tokens). `layout_turns` checks it. If p_{j+1} does not start with p_j,
the chat template rewrites earlier history and the game cannot be one sequence: it raises TokenLayoutError.
If only c_j fails to reappear verbatim (the sampled tokens went decode -> strip -> chat template -> encode and came
back tokenized differently), the turn's tokens after the first difference are not what was sampled: they get mask
0 (or, with strict=True, it raises) and are counted in `n_unmatched_turns`. With the ChatML template of tiny.py
and a tokenizer that round-trips, nothing is lost: the stop token <|im_end|> is sampled (mask 1) and the "\n" the
template writes after it is a template token (mask 0).

Beside the three required lists and `env_mask`, the rollout returns extra fields, which TRL hands to every reward
function as keyword arguments (one value per completion): `outcome` (the trained role's outcome dict from
task.outcome), `outcomes` (every role's), `n_own_turns`, `n_unmatched_turns`. `outcome_reward` reads `outcome`.

A game in which the role never spoke (the counterpart ended it first) is one stop token after the role's final
view, with mask 0: TRL needs one completion per prompt, and it carries the reward but no gradient.

What TRL does with it (trl 1.15): the loss runs on completion_mask * env_mask only, so the counterpart's and the
template tokens are context, never trained. The importance ratio of the clipped loss does NOT use these sampling
log-probs: without vLLM, TRL takes the old log-probs from its own forward pass (or, when generation and update are
aligned, the detached current ones: ratio 1). Only its vLLM importance-sampling correction and its
`off_policy_mask_threshold` read them. TRL recomputes log-probs at `temperature` without top-p, so top_p < 1 makes
sampling and training distributions differ, as in TRL's own generation. `max_completion_length` does not bound
these completions (the per-turn cap is `max_new_tokens`); `loss_type="dr_grpo"` still divides by it, and
`mask_truncated_completions` drops a game whose last own turn hit `max_new_tokens`. Sampling always runs through
dialogrl's own batched sampler on the trainer's model; with `use_vllm` TRL would only sync weights to vLLM for
nothing.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dialogrl.agents import LMAgent
from dialogrl.game import Agent, Task, Turn
from dialogrl.rollout import play
from dialogrl.seeds import stream_seed
from dialogrl.trl_compat import grpo_trainer_class  # noqa: F401  (re-exported)

SCENARIO_KEY = "scenario"  # the extra key on a prompt's first message that names its scenario


class TokenLayoutError(ValueError):
    """A played game cannot be laid out as one token-in/token-out sequence."""


# ------------------------------------------------------------------------------------------------ the dataset

def scenario_dataset(task: Task, n: int, seed: int, role: str | None = None):
    """A `datasets.Dataset` of n scenarios for training `role` (the task's first role by default) with GRPOTrainer.

    Row i: "prompt" = the role's view of the fresh game on `task.sample_scenarios(n, seed)[i]` (chat messages; the
    first carries the scenario's address under the extra key "scenario"), and "scenario_seed", "scenario_index"
    (plain columns, which TRL also passes to the reward functions). Use a seed range that evaluation does not use.
    """
    from datasets import Dataset

    role = task.roles[0] if role is None else role
    if role not in task.roles:
        raise ValueError(f"role {role!r} is not a role of {task.name}; roles: {task.roles}")
    rows = []
    for i, scenario in enumerate(task.sample_scenarios(n, seed)):
        prompt = [dict(m) for m in task.view(task.reset(scenario), role)]
        prompt[0][SCENARIO_KEY] = json.dumps({"task": task.name, "role": role, "seed": seed, "n": n, "index": i})
        rows.append({"prompt": prompt, "scenario_seed": seed, "scenario_index": i})
    return Dataset.from_list(rows)


class _ScenarioLookup:
    """Scenario addresses -> scenarios, drawing each (seed, n) list once."""

    def __init__(self, task: Task, role: str):
        self.task, self.role, self.drawn = task, role, {}

    def __call__(self, prompt: list[dict]):
        raw = prompt[0].get(SCENARIO_KEY) if prompt and isinstance(prompt[0], dict) else None
        if raw is None:
            raise ValueError(f"a prompt without a {SCENARIO_KEY!r} key on its first message: build the dataset "
                             "with dialogrl.rl.trl_rollout.scenario_dataset(task, n, seed, role)")
        key = json.loads(raw)
        if key["task"] != self.task.name or key["role"] != self.role:
            raise ValueError(f"the dataset was made for task {key['task']!r}, role {key['role']!r}; this rollout "
                             f"plays task {self.task.name!r}, role {self.role!r}")
        if (key["seed"], key["n"]) not in self.drawn:
            self.drawn[key["seed"], key["n"]] = self.task.sample_scenarios(key["n"], key["seed"])
        scenario = self.drawn[key["seed"], key["n"]][key["index"]]
        view = self.task.view(self.task.reset(scenario), self.role)
        if [(m["role"], m["content"]) for m in view] != [(m["role"], m["content"]) for m in prompt]:
            raise ValueError(f"the prompt of scenario {key} is not the role's view under this task: the dataset was "
                             "made with other task settings (max_turns, protocol, ...)")
        return scenario


# --------------------------------------------------------------------------------------------------- the layout

@dataclass
class Layout:
    """One game as one sequence for the trained role (see the module docstring); the lists after the prompt align."""
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]        # 1: a token the role sampled, in the context it sampled it in; 0: anything else
    logprobs: list[float]      # sampling log-prob where env_mask is 1, else 0.0
    n_own_turns: int
    n_unmatched_turns: int     # own turns whose sampled tokens did not all reappear verbatim in the next prompt


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _show(tokenizer, ids: Sequence[int]) -> str:
    return repr(tokenizer.decode(list(ids))) if tokenizer is not None else str(list(ids))


def layout_turns(turns: Sequence[Turn], strict: bool = False, tokenizer=None) -> Layout:
    """Lay out one role's sampled turns (in game order, each with prompt_ids, completion_ids, logprobs) as one sequence.

    Raises TokenLayoutError if a turn's prompt does not start with the previous turn's prompt (the chat template
    rewrote history), and with strict=True also if a turn's sampled tokens do not reappear verbatim in the next
    prompt. `tokenizer` (optional) only makes the error messages readable.
    """
    own = [t for t in turns if t.completion_ids]
    if not own:
        raise ValueError("no sampled turn to lay out")
    for j, (a, b) in enumerate(zip(own, own[1:]), start=1):
        if b.prompt_ids[:len(a.prompt_ids)] != a.prompt_ids:
            i = _first_difference(a.prompt_ids, b.prompt_ids)
            raise TokenLayoutError(
                f"the chat template breaks the token-in/token-out prefix property: the prompt of role "
                f"{a.role!r}'s turn {j + 1} does not start with the prompt of its turn {j} (they differ from token {i}:"
                f" {_show(tokenizer, a.prompt_ids[i:i + 8])} vs {_show(tokenizer, b.prompt_ids[i:i + 8])}). The "
                "template renders earlier turns differently once the dialogue goes on (e.g. it drops reasoning or "
                "re-renders the generation prompt), so one game is not one sequence; train per turn instead "
                "(dialogrl.rl.trainer).")
    last = own[-1]
    seq = last.prompt_ids + last.completion_ids                     # (T,) the role's final chat view, token for token
    mask, logps = [0] * len(seq), [0.0] * len(seq)
    unmatched = 0
    for j, t in enumerate(own, start=1):
        start, c = len(t.prompt_ids), t.completion_ids
        if len(t.logprobs or []) != len(c):
            raise TokenLayoutError(f"turn {j} of role {t.role!r} has {len(c)} sampled tokens but "
                                   f"{len(t.logprobs or [])} log-probs")
        k = _first_difference(seq[start:start + len(c)], c)         # c[:k] is exactly what was sampled, in context
        if k < len(c):
            unmatched += 1
            if strict:
                raise TokenLayoutError(
                    f"the tokens role {t.role!r} sampled in turn {j} do not reappear verbatim in its next prompt "
                    f"(from token {k}: sampled {_show(tokenizer, c[k:k + 8])}, re-encoded "
                    f"{_show(tokenizer, seq[start + k:start + k + 8])}). Decoding, stripping and re-encoding the "
                    "text gave other ids: a tokenizer that pre-tokenizes differently from the one the model was "
                    "trained with, a non-canonical tokenization sampled by the model, or a stop token other than "
                    "the template's end-of-turn token. strict=False keeps the matching part and masks the rest.")
        mask[start:start + k] = [1] * k
        logps[start:start + k] = t.logprobs[:k]
    p = len(own[0].prompt_ids)
    return Layout(seq[:p], seq[p:], mask[p:], logps[p:], len(own), unmatched)


# -------------------------------------------------------------------------------------------------- the rollout

class _PolicyAgent(LMAgent):
    """An LMAgent that samples from the model exactly as it is: TRL's policy, whatever adapter is active."""

    def _context(self):
        return contextlib.nullcontext()


def make_rollout_func(task: Task, role: str, counterpart: Agent | dict[str, Agent], max_new_tokens: int = 48,
                      tokenizer=None, strict: bool = False, warn_unmatched: float = 0.5
                      ) -> Callable[[list, object], dict]:
    """A `rollout_func` for TRL's GRPOTrainer that trains `role` of `task` over whole games.

    role: the trained role; it is played by the trainer's model (temperature and top_p from the GRPOConfig).
    counterpart: the agent of every other role, or a dict role -> agent (e.g. ScriptedAgent("fair")).
    max_new_tokens: the cap on each of the role's turns (TRL's max_completion_length does not apply).
    tokenizer: defaults to the trainer's processing_class.
    strict: raise when a turn's sampled tokens do not reappear verbatim in the next prompt, instead of masking.
    warn_unmatched: warn when more than this share of the role's non-final turns in a batch were (partly) masked.
    The dataset must come from `scenario_dataset(task, n, seed, role)`. Returns f(prompts, trainer) -> dict with
    prompt_ids, completion_ids, logprobs, env_mask (lists, one per prompt) and the extra fields outcome, outcomes,
    n_own_turns, n_unmatched_turns.
    """
    if role not in task.roles:
        raise ValueError(f"role {role!r} is not a role of {task.name}; roles: {task.roles}")
    others = [r for r in task.roles if r != role]
    counterparts = dict(counterpart) if isinstance(counterpart, dict) else {r: counterpart for r in others}
    missing = [r for r in others if r not in counterparts]
    if missing:
        raise ValueError(f"no counterpart agent for role(s) {missing}")
    lookup = _ScenarioLookup(task, role)
    calls = itertools.count()   # this process's rollout calls: each game's seed is keyed by (call, index)

    def rollout_func(prompts: list, trainer) -> dict:
        from trl.models.utils import unwrap_model_for_generation

        args = trainer.args
        if args.top_k or args.min_p or getattr(args, "repetition_penalty", 1.0) != 1.0:
            raise ValueError("the dialogue rollout samples with temperature and top_p only; unset top_k, min_p and "
                             "repetition_penalty in the GRPOConfig")
        tok = tokenizer if tokenizer is not None else trainer.processing_class
        scenarios = [lookup(p) for p in prompts]
        # every game its own seed (dialogrl.seeds), also the num_generations copies of one prompt (a GRPO group)
        call, first = next(calls), trainer.accelerator.process_index * len(prompts)
        seeds = [stream_seed("train-games", args.seed, call, first + i) for i in range(len(prompts))]
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=args.ds3_gather_for_generation) as model:
            was_training = model.training
            model.eval()  # no dropout while sampling
            try:
                policy = _PolicyAgent(model, tok, name="policy", max_new_tokens=max_new_tokens,
                                      temperature=args.temperature, top_p=args.top_p, select_by_likelihood=False)
                episodes = play(task, {role: policy, **counterparts}, scenarios, seeds=seeds)
            finally:
                model.train(was_training)

        out = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "outcome", "outcomes",
                               "n_own_turns", "n_unmatched_turns")}
        for ep in episodes:
            turns = [t for t in ep.state.turns if t.role == role and t.completion_ids]
            if turns:
                lay = layout_turns(turns, strict=strict, tokenizer=tok)
            else:  # the game ended before the role spoke: one masked stop token after its final view
                view = tok.apply_chat_template(task.view(ep.state, role), add_generation_prompt=True,
                                               tokenize=True, return_dict=True)["input_ids"]
                lay = Layout(view, [tok.eos_token_id], [0], [0.0], 0, 0)
            out["prompt_ids"].append(lay.prompt_ids)
            out["completion_ids"].append(lay.completion_ids)
            out["logprobs"].append(lay.logprobs)
            out["env_mask"].append(lay.env_mask)
            out["outcome"].append(ep.outcome[role])
            out["outcomes"].append(ep.outcome)
            out["n_own_turns"].append(lay.n_own_turns)
            out["n_unmatched_turns"].append(lay.n_unmatched_turns)
        earlier = sum(max(n - 1, 0) for n in out["n_own_turns"])  # the last turn always matches
        if earlier and sum(out["n_unmatched_turns"]) > warn_unmatched * earlier:
            warnings.warn(f"{sum(out['n_unmatched_turns'])} of {earlier} earlier turns of role {role!r} did not "
                          "reappear verbatim in the next prompt and were partly masked: check that the tokenizer "
                          "round-trips the model's samples (layout_turns(..., strict=True) shows the first case)",
                          stacklevel=2)
        return out

    return rollout_func


def outcome_reward(completions: list, outcome: list[dict], log_metric=None, **kwargs) -> list[float]:
    """GRPO reward function: the trained role's game reward, `outcome[i]["reward"]` (from make_rollout_func).

    With TRL's `log_metric` (passed to every reward function), also logs the batch mean of each numeric outcome
    field (score, agreed, n_invalid, ...) as "outcome/<field>" and of the rollout's n_unmatched_turns.
    """
    if log_metric is not None:
        for name in outcome[0]:
            values = [o[name] for o in outcome]
            if all(isinstance(v, (int, float)) for v in values):  # bools too
                log_metric(f"outcome/{name}", sum(float(v) for v in values) / len(values))
        unmatched = kwargs.get("n_unmatched_turns")
        if unmatched:
            log_metric("rollout/unmatched_turns", sum(unmatched) / len(unmatched))
    return [float(o["reward"]) for o in outcome]
