"""TRL on machines without its fused log-prob kernel (CPU-only torch): one check, and plain-torch replacements.

TRL 1.15 scores tokens only through a fused LM-head kernel written in Triton (`trl.trainer.utils.
_ChunkedLogProbFunction`, reached by `model(..., fused_lm_head=True)`): it needs Triton and a GPU, and TRL has no
fallback. Where `fused_kernel_usable()` is False, dialogrl uses TRL's trainers through these replacements, which
compute the same quantities from the model's plain logits:

    sft_trainer_class()      SFTTrainer, or PlainLossSFTTrainer (transformers' causal-LM loss)
    grpo_trainer_class()     GRPOTrainer, or PlainGRPOTrainer (per-token log-probs and entropy from the logits)
    with plain_logprob_kernel(): DPOTrainer(...).train()     # TRL's kernel swapped for TorchLogProbs meanwhile
"""
from __future__ import annotations

import contextlib

import torch

from dialogrl.tokens import token_logprobs, token_logprobs_and_entropy


def fused_kernel_usable() -> bool:
    """Whether TRL's fused Triton log-prob kernel can run here: Triton is installed and a CUDA GPU is present."""
    from trl.trainer import utils as trl_utils

    return torch.cuda.is_available() and getattr(trl_utils, "_ChunkedLogProbFunction", None) is not None


# ------------------------------------------------------------------------------------------------------- SFT

def sft_trainer_class():
    """TRL's SFTTrainer where its fused kernel can run, else `PlainLossSFTTrainer`."""
    from transformers import Trainer
    from trl import SFTTrainer

    if fused_kernel_usable():
        return SFTTrainer

    class PlainLossSFTTrainer(SFTTrainer):
        """SFTTrainer with transformers' own causal-LM loss (labels are already -100 outside assistant turns).

        TRL 1.15's SFTTrainer always takes its fused LM-head loss; this keeps TRL's data handling (chat template,
        assistant masks, collation) and computes the same token-mean NLL from the logits, as Trainer does.
        """

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return Trainer.compute_loss(self, model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)

    return PlainLossSFTTrainer


# ------------------------------------------------------------------------------------------------------ GRPO

def grpo_trainer_class():
    """TRL's GRPOTrainer where its fused kernel can run, else `PlainGRPOTrainer`."""
    from trl import GRPOTrainer

    if fused_kernel_usable():
        return GRPOTrainer

    class PlainGRPOTrainer(GRPOTrainer):
        """GRPOTrainer with per-token log-probs from the model's logits instead of TRL's fused LM-head kernel:
        log softmax(logits / temperature) at each completion token, and the entropy, from the plain forward
        pass. Text models only."""

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                               batch_size=None, compute_entropy=False, compute_aux_loss=False,
                                               **multimodal):
            if compute_aux_loss or any(v is not None for v in multimodal.values()):
                raise NotImplementedError("PlainGRPOTrainer scores text-only, dense models")
            K = logits_to_keep
            batch_size = batch_size or input_ids.size(0)
            all_logps, all_entropies = [], []
            for start in range(0, input_ids.size(0), batch_size):
                ids, mask = input_ids[start:start + batch_size], attention_mask[start:start + batch_size]
                with self.accelerator.autocast():
                    logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=K + 1).logits  # (b, K+1, V)
                z = logits[:, :-1].float() / self.temperature                                      # (b, K, V)
                real = mask[:, -K:].to(z.dtype)                                                     # 0 on padding
                if compute_entropy:
                    logp, ent = token_logprobs_and_entropy(z, ids[:, -K:])
                    all_entropies.append(ent * real)
                else:
                    logp = token_logprobs(z, ids[:, -K:])
                all_logps.append(logp * real)                                                       # (b, K)
            entropies = torch.cat(all_entropies) if compute_entropy else None
            return torch.cat(all_logps), entropies, None

    return PlainGRPOTrainer


# ------------------------------------------------------------------------------------------------------- DPO

class TorchLogProbs:
    """A stand-in for TRL's `_ChunkedLogProbFunction` by plain autograd, with its outputs: the log-prob of the
    target and, on request, the entropy, log sum p^2, the mean logit and whether the target is the argmax.
    hidden (N, H), weight (V, H), targets (N,) -> five (N,) tensors or None."""

    @staticmethod
    def apply(hidden, weight, bias, targets, temperature, chunk_size, softcap=None, logit_scale=1.0, outputs=()):
        z = torch.nn.functional.linear(hidden, weight, bias).float() * logit_scale
        if softcap is not None:
            z = softcap * torch.tanh(z / softcap)
        z = z / temperature
        logp = z.log_softmax(-1)  # one log-softmax for every output: their gradients meet in one backward
        return (logp.gather(-1, targets[:, None]).squeeze(-1),
                -(logp.exp() * logp).sum(-1) if "entropy" in outputs else None,
                torch.logsumexp(2 * logp, -1) if "log_sum_sq_probs" in outputs else None,
                z.mean(-1) if "mean_logits" in outputs else None,
                (z.argmax(-1) == targets) if "is_top1" in outputs else None)


@contextlib.contextmanager
def plain_logprob_kernel():
    """Inside, TRL's trainers (DPOTrainer, ...) score tokens with `TorchLogProbs` where the fused kernel cannot
    run; TRL is restored afterwards. Where the kernel runs, nothing changes."""
    from trl.trainer import utils as trl_utils

    if fused_kernel_usable():
        yield
        return
    saved = getattr(trl_utils, "_ChunkedLogProbFunction", None)
    trl_utils._ChunkedLogProbFunction = TorchLogProbs
    try:
        yield
    finally:
        trl_utils._ChunkedLogProbFunction = saved
