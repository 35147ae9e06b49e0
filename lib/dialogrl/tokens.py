"""Token utilities shared by every trainer and metric: padding id lists, per-token log-probs, entropy, masked means.

    ids, attn, pos = pad(seqs, pad_id)                     # (B, L) each, left-padded: sequences end together
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, :-1]
    logp = token_logprobs(logits, ids[:, 1:])              # (B, L-1): log pi(x_{t+1} | x_<=t)
    H = entropy(logits)                                    # (B, L-1)
    masked_mean(logp, attn[:, 1:])                         # mean over the real tokens only
    ids, mask = assistant_tokens(tok, conversation)        # a chat's ids under tok's template, 1 on the assistant's

Log-softmax runs in float32 (bf16 logits lose the small probabilities); divide by a sampling temperature before
calling, as `logits.float() / T`.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def pad(seqs: Sequence[Sequence[int]], pad_id: int, side: str = "left", device=None
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad id lists to one (B, L) batch: (ids, attention_mask, position_ids), all long tensors on `device`.

    side="left" (the default, as for generation and for scoring completions that end every row):
        [pad ... pad | x_0 ... x_n];  side="right": [x_0 ... x_n | pad ... pad].
    position_ids count the real tokens only (0 .. n-1) and are 0 on padding, so a padded row computes what it
    would alone; attention_mask is 1 on real tokens.
    """
    if side not in ("left", "right"):
        raise ValueError(f"side={side!r}: choose 'left' or 'right'")
    B, L = len(seqs), max(len(s) for s in seqs)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    pos = torch.zeros((B, L), dtype=torch.long)
    for b, s in enumerate(seqs):
        real = slice(L - len(s), L) if side == "left" else slice(0, len(s))
        ids[b, real] = torch.tensor(list(s), dtype=torch.long)
        attn[b, real] = 1
        pos[b, real] = torch.arange(len(s))
    return ids.to(device), attn.to(device), pos.to(device)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per position: (..., V) logits and (...) target ids -> (...) float32."""
    return logits.float().log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """H = -sum_v p_v log p_v of softmax(logits) per position: (..., V) -> (...) float32."""
    logp = logits.float().log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)


def token_logprobs_and_entropy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_logprobs` and `entropy` from one log-softmax (one (..., V) tensor in memory, one backward)."""
    logp = logits.float().log_softmax(-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over the entries where mask is nonzero, all of them together (a token-level mean, as in DAPO);
    0 when the mask is empty."""
    mask = mask.float()
    return (x * mask).sum() / mask.sum().clamp(min=1)


def assistant_tokens(tokenizer, conversation: list[dict]) -> tuple[list[int], list[int]]:
    """The conversation's token ids under the tokenizer's chat template and a 0/1 mask of the assistant's tokens:
    what the model writes after the generation prompt, its end-of-turn token included (not the template's newline
    after it). The first way that applies:
      1. the template's `{% generation %}` markers (the embedded models', `dialogrl.packaged`'s);
      2. the text each assistant message adds to the conversation before it with the generation prompt (trailing
         whitespace left out): hub templates without markers (Qwen2.5, Llama 3 and 3.1, Gemma, SmolLM2's ChatML,
         ...), which render a conversation's beginning as the beginning of its text;
      3. TRL's training version of a known template that does not (Qwen3, which writes the empty thinking block only
         into the last turn: trl.chat_template_utils.get_training_chat_template).
    A ValueError names a template for which none does."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = tokenizer.chat_template
    if template is None:
        raise ValueError(f"{tokenizer.name_or_path}: the tokenizer has no chat template")
    if has_generation_markers(template):
        return _marked_tokens(tokenizer, conversation, None)

    def render(messages, prompt=False):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt)

    full, spans = render(conversation), []
    for j, message in enumerate(conversation):
        if message["role"] == "assistant":
            before, through = render(conversation[:j], prompt=True) if j else "", render(conversation[:j + 1])
            if not (through.startswith(before) and full.startswith(through)):
                break
            spans.append((len(before), len(through.rstrip())))   # not the newline after the end of turn
    else:
        enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [int(any(start < b and end > a for a, b in spans))
                                        for start, end in enc["offset_mapping"]]
    try:
        return _marked_tokens(tokenizer, conversation, get_training_chat_template(tokenizer))
    except ValueError:
        raise ValueError(f"{tokenizer.name_or_path}: its chat template has no {{% generation %}} markers, renders a "
                         "conversation's beginning differently inside the whole, and TRL knows no training version "
                         "of it, so the assistant's tokens cannot be found: set tokenizer.chat_template to the same "
                         "template with {% generation %} ... {% endgeneration %} around each assistant message"
                         ) from None


def _marked_tokens(tokenizer, conversation: list[dict], template: str | None) -> tuple[list[int], list[int]]:
    enc = tokenizer.apply_chat_template(conversation, chat_template=template, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    return list(enc["input_ids"]), list(enc["assistant_masks"])
