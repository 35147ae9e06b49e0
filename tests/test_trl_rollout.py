"""TRL interop: one game as one token-in/token-out sequence, and TRL's GRPOTrainer training one role with it."""
import json

import pytest
import torch

from conftest import small_build
from dialogrl.agents import LMAgent
from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import ScriptedAgent
from dialogrl.game import Turn
from dialogrl.models import load_model
from dialogrl.rl.trl_rollout import (
    SCENARIO_KEY,
    TokenLayoutError,
    _ScenarioLookup,
    grpo_trainer_class,
    layout_turns,
    make_rollout_func,
    outcome_reward,
    scenario_dataset,
)
from dialogrl.rollout import play
from dialogrl.run import seed_everything

TASK = DealOrNoDeal(max_turns=4)


def tiny_dond():
    """tiny-dond's test build (conftest.small_build; cached after its first build) with the tokenizer it was trained
    with.

    AutoTokenizer (transformers 5) reloads the saved tokenizer as a Qwen2Tokenizer, whose own pre-tokenizer splits
    digits apart (' 1' -> ' ', '1'), unlike the trained byte-level one; the model's samples then do not round-trip.
    PreTrainedTokenizerFast keeps the saved tokenizer.json as it is.
    """
    from transformers import PreTrainedTokenizerFast

    path = small_build("tiny-dond")
    model, _ = load_model(str(path), device="cpu")
    tok = PreTrainedTokenizerFast.from_pretrained(path)
    return model, tok


@pytest.fixture(scope="module")
def dond():
    return tiny_dond()


def runs(mask):
    """Maximal runs of 1s in a 0/1 list, as (start, end) pairs."""
    out, start = [], None
    for i, m in enumerate(list(mask) + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            out.append((start, i))
            start = None
    return out


@pytest.mark.parametrize("role", ["A", "B"])
def test_a_played_game_lays_out_token_in_token_out(dond, role):
    model, tok = dond
    seed_everything(2)
    agents = {role: LMAgent(model, tok, max_new_tokens=32), TASK.other(role): ScriptedAgent("fair", seed=1)}
    # 32 games: enough that the role speaks again after the counterpart in several (B does only in games without a deal
    # by the third turn; 8 games held 2 such on one build and 1 on another)
    episodes = play(TASK, agents, TASK.sample_scenarios(32, seed=5))
    multi = 0
    for ep in episodes:
        own = [t for t in ep.state.turns if t.role == role]
        if not own:
            continue
        try:
            lay = layout_turns(own, strict=True, tokenizer=tok)  # strict: every sampled token is in the sequence
        except TokenLayoutError:
            # a turn whose sampled ids do not come back from its text (a broken UTF-8 byte, say): the case strict
            # refuses; the lenient layout says so by its unmatched turns
            assert layout_turns(own, strict=False, tokenizer=tok).n_unmatched_turns > 0
            continue
        ids, mask, logps = lay.completion_ids, lay.env_mask, lay.logprobs
        assert len(ids) == len(mask) == len(logps)
        assert lay.prompt_ids == own[0].prompt_ids
        assert lay.prompt_ids + ids == own[-1].prompt_ids + own[-1].completion_ids
        assert sum(mask) == sum(len(t.completion_ids) for t in own) and lay.n_unmatched_turns == 0
        assert all(lp == 0.0 for lp, m in zip(logps, mask) if not m)
        # each run of mask 1 is one of the role's turns: it decodes to what the role said, stop token included
        segments = runs(mask)
        assert len(segments) == len(own)
        for (a, b), t in zip(segments, own):
            assert ids[a:b] == t.completion_ids and logps[a:b] == t.logprobs
            assert tok.decode(ids[a:b], skip_special_tokens=True).strip() == t.text
        # the counterpart's turns between the role's first and last ones sit in the mask-0 part
        hidden = tok.decode([i for i, m in zip(ids, mask) if not m])
        between = ep.state.turns[ep.state.turns.index(own[0]):ep.state.turns.index(own[-1])]
        theirs = [t for t in between if t.role != role]
        assert all(t.text in hidden for t in theirs)
        multi += bool(theirs)
        # the sampling log-probs are the model's own on this one sequence (what TRL recomputes, at temperature 1)
        seq = torch.tensor([lay.prompt_ids + ids])
        with torch.no_grad():
            full = model(input_ids=seq).logits[0, :-1].float().log_softmax(-1)
        recomputed = full.gather(-1, seq[0, 1:, None]).squeeze(-1)[len(lay.prompt_ids) - 1:]
        on = torch.tensor(mask, dtype=torch.bool)
        assert (recomputed[on] - torch.tensor(logps)[on]).abs().max().item() < 1e-4
    assert multi >= 2  # games where the role spoke again after the counterpart: the case that needs the layout


def test_layout_rejects_a_template_that_rewrites_history_and_masks_retokenized_turns():
    t1 = Turn("A", "hi", prompt_ids=[1, 2, 3], completion_ids=[10, 11, 9], logprobs=[-0.1, -0.2, -0.3])
    t2 = Turn("A", "ok", prompt_ids=[1, 2, 3, 10, 11, 9, 5, 6, 7], completion_ids=[12, 9], logprobs=[-0.4, -0.5])
    lay = layout_turns([t1, t2])
    assert lay.prompt_ids == [1, 2, 3] and lay.completion_ids == [10, 11, 9, 5, 6, 7, 12, 9]
    assert lay.env_mask == [1, 1, 1, 0, 0, 0, 1, 1]
    assert lay.logprobs == [-0.1, -0.2, -0.3, 0.0, 0.0, 0.0, -0.4, -0.5]
    # the sampled [10, 11] came back as [10, 13]: only the part before the first difference is trained
    t2b = Turn("A", "ok", prompt_ids=[1, 2, 3, 10, 13, 9, 5, 6, 7], completion_ids=[12, 9], logprobs=[-0.4, -0.5])
    lay = layout_turns([t1, t2b])
    assert lay.env_mask == [1, 0, 0, 0, 0, 0, 1, 1] and lay.n_unmatched_turns == 1
    with pytest.raises(TokenLayoutError, match="do not reappear verbatim"):
        layout_turns([t1, t2b], strict=True)
    # a template that renders the earlier context differently breaks the prefix property: no sequence
    t2c = Turn("A", "ok", prompt_ids=[1, 4, 3, 10, 11, 9, 5], completion_ids=[12, 9], logprobs=[-0.4, -0.5])
    with pytest.raises(TokenLayoutError, match="prefix property"):
        layout_turns([t1, t2c])


def test_scenario_dataset_rows_name_their_scenarios():
    ds = scenario_dataset(TASK, n=5, seed=3, role="B")
    scenarios = TASK.sample_scenarios(5, seed=3)
    lookup = _ScenarioLookup(TASK, "B")
    for i, row in enumerate(ds):
        assert row["scenario_index"] == i and json.loads(row["prompt"][0][SCENARIO_KEY])["index"] == i
        assert lookup(row["prompt"]) == scenarios[i]
    with pytest.raises(ValueError, match="role 'B'"):
        _ScenarioLookup(TASK, "A")(ds[0]["prompt"])
    with pytest.raises(ValueError, match="other task settings"):
        _ScenarioLookup(DealOrNoDeal(max_turns=6), "B")(ds[0]["prompt"])


def test_grpo_trainer_trains_one_role_over_whole_games(tmp_path, monkeypatch):
    from trl import GRPOConfig

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL: we know
    seed_everything(0)
    model, tok = tiny_dond()
    rollout = make_rollout_func(TASK, role="A", counterpart=ScriptedAgent("fair", seed=0), max_new_tokens=24,
                                strict=True)
    calls = []

    def recorded(prompts, trainer):
        out = rollout(prompts, trainer)
        calls.append((prompts, out))
        return out

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_steps=2,
                      learning_rate=1e-3, logging_steps=1, report_to="none", use_cpu=True, save_strategy="no",
                      max_completion_length=256, seed=0, bf16=False, dataloader_num_workers=0)
    trainer = grpo_trainer_class()(model=model, processing_class=tok, reward_funcs=outcome_reward, args=args,
                                   train_dataset=scenario_dataset(TASK, n=16, seed=11, role="A"),
                                   rollout_func=recorded)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    assert len(calls) == 2
    for prompts, out in calls:  # TRL passes each row num_generations times in a row; we answer one game each
        assert len(prompts) == len(out["completion_ids"]) == len(out["env_mask"]) == len(out["outcome"]) == 8
        assert all(prompts[i] == prompts[i - i % 4] for i in range(8))
    logs = trainer.state.log_history
    assert any("loss" in row for row in logs)
    assert any("outcome/score" in row for row in logs)  # the extra fields reached the reward function
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def test_a_game_the_role_never_speaks_in_is_one_masked_token(dond, tmp_path):
    from trl import GRPOConfig

    model, tok = dond
    task = DealOrNoDeal(max_turns=1)  # A's first turn ends the talk: B never speaks
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, report_to="none",
                      use_cpu=True, save_strategy="no", bf16=False)
    trainer = grpo_trainer_class()(model=model, processing_class=tok, reward_funcs=outcome_reward, args=args,
                                   train_dataset=scenario_dataset(task, n=2, seed=0, role="B"))
    prompts = [row["prompt"] for row in scenario_dataset(task, n=2, seed=0, role="B")]
    out = make_rollout_func(task, "B", ScriptedAgent("fair"))(prompts, trainer)
    assert out["completion_ids"] == [[tok.eos_token_id]] * 2 and out["env_mask"] == [[0]] * 2
    assert out["n_own_turns"] == [0, 0] and outcome_reward(None, out["outcome"]) == [0.0, 0.0]


def test_trl_compat_on_cpu_uses_the_plain_replacements():
    """Without CUDA, TRL's fused kernel is never used; the DPO stand-in computes what tokens.py computes, and the
    kernel swap is undone afterwards."""
    from trl.trainer import utils as trl_utils

    from dialogrl import trl_compat
    from dialogrl.tokens import entropy, token_logprobs

    if torch.cuda.is_available():
        pytest.skip("checks the CPU path")
    assert not trl_compat.fused_kernel_usable()
    assert trl_compat.grpo_trainer_class().__name__ == "PlainGRPOTrainer" and grpo_trainer_class is \
        trl_compat.grpo_trainer_class
    assert trl_compat.sft_trainer_class().__name__ == "PlainLossSFTTrainer"
    before = getattr(trl_utils, "_ChunkedLogProbFunction", None)
    with trl_compat.plain_logprob_kernel():
        assert trl_utils._ChunkedLogProbFunction is trl_compat.TorchLogProbs
    assert getattr(trl_utils, "_ChunkedLogProbFunction", None) is before
    g = torch.Generator().manual_seed(0)
    hidden, weight, targets = torch.randn(5, 4, generator=g), torch.randn(9, 4, generator=g), torch.arange(5)
    logp, ent, _, _, top1 = trl_compat.TorchLogProbs.apply(hidden, weight, None, targets, 0.5, 64,
                                                          outputs=("entropy", "is_top1"))
    z = hidden @ weight.T / 0.5
    assert torch.allclose(logp, token_logprobs(z, targets)) and torch.allclose(ent, entropy(z))
    assert top1.tolist() == (z.argmax(-1) == targets).tolist()
