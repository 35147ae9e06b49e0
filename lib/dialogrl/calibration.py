"""Simulator calibration: align a user simulator with human dialogue logs, and measure how well it is aligned.

An *uncalibrated* simulator is the warm-start model asked to play the user's role (a prompt-based simulator) or a
single default persona. *Calibration* fine-tunes the simulator on the human logs, seen from the simulated role
(the human's turns as the assistant's, everything else as context), with TRL's SFTTrainer; optionally DPO then
prefers each human turn over what the uncalibrated simulator said in the same context.

    convs = role_conversations(task, human_games, role="B")          # the human role's chat views
    sim_dir = calibrate_sft(warm_start_dir, convs, out_dir)           # SFT with TRL (loss on the role's turns)
    pairs = preference_pairs(task, human_games, "B", uncalibrated)     # human turn (chosen) vs simulator (rejected)
    dpo_dir = calibrate_dpo(sim_dir, pairs, out_dir)                   # optional DPO with TRL
    turn_nll(model, tok, held_out_convs)                               # NLL per token of the human turns
    behaviour_distance(sim_stats, human_stats, scales)                 # |sim - human| per statistic, scaled
    curve = acceptance_curve(dealnodeal.decisions(task, games, "B"), dealnodeal.DECISION_BINS)
    decision_distance(sim_curve, human_curve)                          # acceptance by worth, weighted by the humans'
    change = distance_change(uncalibrated_per_seed, calibrated_per_seed)  # t over seeds: did calibration help?

The behaviour statistics are the game's (Deal or No Deal's: `dealnodeal.behaviour_stats`, acceptance, concession,
length, ..., and their scales `dealnodeal.BEHAVIOUR_SCALES`).

The calibration metrics of notebook 01: the held-out human-turn NLL (how likely the simulator finds what humans
actually said), the behaviour distance (how far the simulator's games are from the humans' in the statistics that
drive a negotiation: how often it accepts, how much it concedes, how long it talks) and, what decides the game, the
decision distance: how far the simulator's acceptance, as a function of what a proposal gives it, is from the
humans' (`acceptance_curve`, `decision_distance`). Calibration *happened* when a distance of the calibrated
simulator is below the uncalibrated one's with the t-interval over training seeds below zero (`distance_change`).
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from dialogrl.game import GameState, Task
from dialogrl.models import load_model
from dialogrl.stats import mean_ci, t_interval
from dialogrl.tiny import TinyConfig, sft_warm_start
from dialogrl.tokens import assistant_tokens, pad, token_logprobs
from dialogrl.trl_compat import plain_logprob_kernel

# ------------------------------------------------------------------------------------------------------ data

def role_conversations(task: Task, games: Sequence[GameState], role: str) -> list[list[dict]]:
    """Each finished game as `role`'s chat view: the system prompt with its private information, its own turns as
    the assistant's and the counterpart's as the user's. Games in which `role` never spoke are skipped."""
    out = []
    for state in games:
        if any(t.role == role for t in state.talk_turns()):
            out.append(task.view(state, role))
    return out


@dataclass
class PreferencePair:
    """A context (chat messages up to a human turn), the human's turn (chosen) and the simulator's (rejected)."""
    prompt: list[dict]
    chosen: str
    rejected: str


def preference_pairs(conversations: Sequence[list[dict]], simulator, max_pairs: int | None = None
                     ) -> list[PreferencePair]:
    """For every assistant (human) turn of the conversations, what the simulator says in the same context.

    simulator: an LMAgent (its `generate(messages_batch)` samples one reply per context, batched). Pairs where the
    simulator happened to say exactly the human's words are dropped (no preference to learn).
    """
    prompts, chosen = [], []
    for conv in conversations:
        for i, m in enumerate(conv):
            if m["role"] == "assistant":
                prompts.append(conv[:i])
                chosen.append(m["content"])
    if max_pairs is not None:
        prompts, chosen = prompts[:max_pairs], chosen[:max_pairs]
    rejected = [u.text for u in simulator.generate(prompts)] if prompts else []
    return [PreferencePair(p, c, r) for p, c, r in zip(prompts, chosen, rejected) if c.strip() != r.strip()]


# ------------------------------------------------------------------------------------------- calibration

def calibrate_sft(model_path: str | Path, conversations: Sequence[list[dict]], out_dir: str | Path,
                  epochs: float = 1.0, lr: float = 1e-3, batch_size: int = 16, max_length: int = 512,
                  seed: int = 0, bf16: bool = False) -> Path:
    """Fine-tune the simulator (all weights) on the human role's conversations with TRL's SFTTrainer, loss on the
    assistant (human) turns only; save it with its tokenizer to out_dir and return out_dir.

    The warm start's own SFT recipe (`dialogrl.tiny.sft_warm_start`) is reused, so a tiny model and a hub model take
    the same path; with a hub model, pass a small lr (1e-5) or fine-tune a LoRA copy instead. bf16: autocast where
    the device has bfloat16; the weights train in float32 (a 1e-5 step is below bf16's and fp16's resolution).
    """
    if not conversations:
        raise ValueError("no conversations to calibrate on")
    model, tok = load_model(str(model_path), device="auto")   # float32 master weights, whatever bf16 says
    model.train()
    cfg = TinyConfig(epochs=epochs, lr=lr, batch_size=batch_size, max_length=max_length, seed=seed, bf16=bf16)
    out_dir = Path(out_dir)
    stats = sft_warm_start(model, tok, list(conversations), cfg, out_dir / "sft")
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    (out_dir / "calibration.json").write_text(json.dumps(
        {"method": "sft", "from": str(model_path), "n_conversations": len(conversations), "epochs": epochs,
         "lr": lr, **stats}, indent=2) + "\n")
    return out_dir


def calibrate_dpo(model_path: str | Path, pairs: Sequence[PreferencePair], out_dir: str | Path, beta: float = 0.1,
                  lr: float = 5e-4, epochs: float = 1.0, batch_size: int = 16, seed: int = 0) -> Path:
    """DPO with TRL's DPOTrainer: prefer the human's turn over the uncalibrated simulator's in the same context.
    The reference policy is the model at `model_path` (the SFT-calibrated simulator). Saves to out_dir."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    if not pairs:
        raise ValueError("no preference pairs to train on")
    model, tok = load_model(str(model_path), device="auto")
    model.train()
    data = Dataset.from_list([{"prompt": p.prompt, "chosen": [{"role": "assistant", "content": p.chosen}],
                               "rejected": [{"role": "assistant", "content": p.rejected}]} for p in pairs])
    out_dir = Path(out_dir)
    args = DPOConfig(output_dir=str(out_dir / "dpo"), beta=beta, learning_rate=lr, num_train_epochs=epochs,
                     per_device_train_batch_size=batch_size, seed=seed, data_seed=seed, save_strategy="no",
                     report_to="none", disable_tqdm=True, logging_steps=10, use_cpu=not torch.cuda.is_available(),
                     bf16=False, dataloader_pin_memory=False)
    with plain_logprob_kernel():  # TRL's fused kernel needs Triton and a GPU
        trainer = DPOTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
        out = trainer.train()
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    (out_dir / "calibration.json").write_text(json.dumps(
        {"method": "dpo", "from": str(model_path), "n_pairs": len(pairs), "beta": beta, "lr": lr,
         "train_loss": out.training_loss}, indent=2) + "\n")
    return out_dir


# ---------------------------------------------------------------------------------------------- metrics

@torch.no_grad()
def turn_nll(model, tokenizer, conversations: Sequence[list[dict]], batch_size: int = 16) -> float:
    """Mean negative log-likelihood (nats per token) of the assistant turns of `conversations` under the model:
    how likely the simulator finds what the humans actually said. Lower is better calibrated. The assistant tokens
    are `assistant_tokens`' (a hub template without markers works too)."""
    model.eval()
    dev = next(model.parameters()).device
    total, count = 0.0, 0
    for i in range(0, len(conversations), batch_size):
        enc = [assistant_tokens(tokenizer, c) for c in conversations[i:i + batch_size]]
        ids, attn, _ = pad([e[0] for e in enc], tokenizer.pad_token_id or 0, side="right", device=dev)   # masked
        target = pad([e[1] for e in enc], 0, side="right", device=dev)[0].bool()                       # (B, L)
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        logp = token_logprobs(logits, ids[:, 1:])                                                      # (B, L-1)
        mask = target[:, 1:]  # token t+1 is predicted at position t
        total += float(-(logp * mask).sum())
        count += int(mask.sum())
    if count == 0:
        raise ValueError("no assistant tokens: the conversations need assistant turns")
    return total / count


def behaviour_distance(sim: dict[str, float], human: dict[str, float],
                       scales: dict[str, float] | None = None) -> dict[str, float]:
    """|sim - human| / scale per statistic both define, and their mean as `total` (0: indistinguishable). scales:
    a typical spread of each statistic, so that none dominates by its units (1 where missing; Deal or No Deal's
    are dealnodeal.BEHAVIOUR_SCALES)."""
    scales = scales or {}
    out = {k: abs(sim[k] - human[k]) / scales.get(k, 1.0) for k in human
           if k in sim and not (math.isnan(sim[k]) or math.isnan(human[k]))}
    out["total"] = float(np.mean(list(out.values()))) if out else float("nan")
    return out


def acceptance_curve(decisions: Sequence[tuple[float, bool]], bins: Sequence[tuple[float, float]]) -> list[dict]:
    """The acceptance rate by what a proposal gives the deciding role: `decisions` are (worth to it, accepted)
    pairs (`dealnodeal.decisions`), `bins` closed ranges of worth, e.g. ((0, 1), (2, 3), ...). Returns one row per
    bin, {"bin": "lo-hi", "lo", "hi", "n" (decisions in it), "accepted" (their share; nan where n is 0)}; a worth
    outside every bin is left out."""
    rows = []
    for lo, hi in bins:
        inside = [bool(a) for w, a in decisions if lo <= w <= hi]
        rows.append({"bin": f"{lo:g}-{hi:g}", "lo": lo, "hi": hi, "n": len(inside),
                     "accepted": float(np.mean(inside)) if inside else float("nan")})
    return rows


def decision_distance(sim: Sequence[dict], human: Sequence[dict]) -> float:
    """The mean absolute difference between two acceptance curves (`acceptance_curve`, the same bins), weighted by
    the humans' decisions in each bin: bins where either curve has no decision are left out (nan if none is
    left). 0: the simulator accepts what the humans accept, as often; 1: the opposite at every worth."""
    if [r["bin"] for r in sim] != [r["bin"] for r in human]:
        raise ValueError(f"the curves have other bins: {[r['bin'] for r in sim]} vs {[r['bin'] for r in human]}")
    both = [(h["n"], abs(s["accepted"] - h["accepted"])) for s, h in zip(sim, human) if s["n"] and h["n"]]
    weight = sum(n for n, _ in both)
    return float(sum(n * d for n, d in both) / weight) if weight else float("nan")


def distance_change(uncalibrated: Sequence[float], calibrated: Sequence[float]) -> dict:
    """Did calibration bring the simulator closer to the held-out humans? Per training seed, the calibrated
    simulator's distance minus the uncalibrated one's (both of that seed's build, against the same humans), their
    mean and its t-interval over the seeds (n - 1 degrees of freedom).

    Returns {"per_seed", "diff", "ci", "seeds", "happened"}: happened iff the interval lies below zero; None (not
    measured) with fewer than 2 seeds or a distance that is nan."""
    u, c = np.asarray(uncalibrated, dtype=float), np.asarray(calibrated, dtype=float)
    if u.shape != c.shape:
        raise ValueError(f"{len(u)} uncalibrated distances but {len(c)} calibrated ones (one per seed each)")
    d = c - u
    measured = len(d) >= 2 and not np.isnan(d).any()
    ci = (t_interval(d) if d.std() > 0 else (float(d.mean()), float(d.mean()))) if measured else (math.nan, math.nan)
    return {"per_seed": d.tolist(), "diff": float(d.mean()) if len(d) else math.nan, "ci": [float(ci[0]), float(ci[1])],
            "seeds": int(len(d)), "happened": bool(ci[1] < 0) if measured else None}


def calibration_record(per_seed) -> dict:
    """A calibration's record from its rows per training seed (a DataFrame: "seed" and the measures, e.g.
    nll_calibrated, behaviour_distance_<simulator>, decision_distance_<simulator>): each measure's mean with its
    t-interval over the seeds (`stats.mean_ci`; nll_uncalibrated None when not measured, a scripted simulator having
    no likelihood), and the calibrated simulator's distance minus the uncalibrated one's ("decision_change",
    "behaviour_change": `distance_change`)."""
    out = {}
    for col in per_seed.columns.drop("seed"):
        out.update(mean_ci(col, per_seed[col].dropna()))
    out.setdefault("nll_uncalibrated", None)
    for what in ("decision", "behaviour"):
        out[f"{what}_change"] = distance_change(per_seed[f"{what}_distance_uncalibrated"],
                                                per_seed[f"{what}_distance_calibrated"])
    return out
