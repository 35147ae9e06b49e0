"""The lean decoding engine (agents.fastdecode): its logits equal the HF forward's, with and without LoRA adapters
(also after an update of the adapter's weights), and its batches give each row what a fresh forward pass gives while
rows join and leave mid-batch."""
import pytest
import torch

from dialogrl.agents.fastdecode import FastDecodeBatch, LeanModel, decode_batch, hidden, lean_supported, lean_trainable
from dialogrl.agents.sampling import DecodeBatch
from dialogrl.models import add_adapters, base_model, load_model, use_adapter

SEQS = [[5, 17, 33, 8, 41, 9, 12], [7, 3], [22, 19, 4, 61, 30, 2, 11, 45, 13, 6, 28]]


def lean_logits(lean: LeanModel, seqs) -> torch.Tensor:
    """Each sequence's last-position logits (B, V) from one right-padded lean forward over empty slots."""
    kv = torch.zeros(lean.n_layers, 2, len(seqs), lean.kvh, 32, lean.d, dtype=lean.core.embed_tokens.weight.dtype)
    ids = torch.zeros(len(seqs), max(map(len, seqs)), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
    return lean.forward(kv, ids, torch.zeros(len(seqs), dtype=torch.long), 0, torch.tensor([len(s) - 1 for s in seqs]))


def hf_logits(model, seqs) -> torch.Tensor:
    with torch.no_grad():
        return torch.stack([model(input_ids=torch.tensor([s])).logits[0, -1] for s in seqs])


@pytest.fixture()
def toy(toy_model_dir):
    return load_model(str(toy_model_dir), device="cpu")


def test_lean_logits_equal_the_hf_forward(toy):
    model, _ = toy
    assert lean_supported(model)
    assert torch.allclose(lean_logits(LeanModel(model), SEQS), hf_logits(model, SEQS), atol=1e-4)


def test_lean_logits_follow_the_active_adapter_and_its_updates(toy):
    model, _ = toy
    model = add_adapters(model, ["red", "blue"], r=4)
    with torch.no_grad():                       # non-zero B, so each adapter changes the logits
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    lean = LeanModel(model)                     # one LeanModel throughout: its weights must follow every change
    seen = []
    for adapter in ("red", "blue", "red"):
        use_adapter(model, adapter)
        out = lean_logits(lean, SEQS)
        assert torch.allclose(out, hf_logits(model, SEQS), atol=1e-4)
        seen.append(out)
    assert not torch.allclose(seen[0], seen[1], atol=1e-3)
    with base_model(model):
        assert torch.allclose(lean_logits(lean, SEQS), hf_logits(model, SEQS), atol=1e-4)
    # an optimizer step on adapter red, as the trainer takes between rollouts
    use_adapter(model, "red")
    params = [p for n, p in model.named_parameters() if ".red." in n and "lora_" in n]
    opt = torch.optim.AdamW(params, lr=0.05)
    model(input_ids=torch.tensor([SEQS[0]])).logits.sum().backward()
    opt.step()
    after = lean_logits(lean, SEQS)
    assert not torch.allclose(after, seen[0], atol=1e-3)
    assert torch.allclose(after, hf_logits(model, SEQS), atol=1e-4)


def test_bf16_weights_with_fp32_adapters_run_lean(toy_model_dir):
    """bf16 weights beside LoRA adapters that peft keeps in fp32 (the gpu profiles' load, and a CPU with native bf16
    under `bench/gpu_check.py --stand-in packaged`): the fused weights take the model's dtype."""
    model, _ = load_model(str(toy_model_dir), adapters=["red"], device="cpu", bf16=True)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    assert {p.dtype for n, p in model.named_parameters() if "lora_" in n} == {torch.float32}
    out, ref = lean_logits(LeanModel(model), SEQS), hf_logits(model, SEQS)
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), ref.float(), atol=0.05 * ref.float().abs().max().item())


def test_a_llama_model_runs_lean():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=80, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).eval()
    assert lean_supported(model)
    assert torch.allclose(lean_logits(LeanModel(model), SEQS), hf_logits(model, SEQS), atol=1e-4)


def test_decode_batch_picks_the_engine(toy):
    model, tok = toy
    args = (model, tok.pad_token_id, [tok.eos_token_id], 8, lambda x: x.log_softmax(-1))
    assert isinstance(decode_batch(*args), FastDecodeBatch)
    assert isinstance(decode_batch(*args, lean=False), DecodeBatch)


@pytest.mark.parametrize("lean", [True, False])
def test_rows_joining_and_leaving_get_a_fresh_forward_pass_logprobs(toy, lean):
    """Rows join a running batch at different steps (some from a cached prefix of an earlier turn) and leave when
    they stop; every row's sampling log-probs equal those of one fresh forward pass over prompt + completion."""
    model, tok = toy
    torch.manual_seed(0)
    batch = decode_batch(model, tok.pad_token_id, [tok.eos_token_id], 6, lambda x: x.log_softmax(-1),
                         keep_cache=True, join_fraction=0.0, lean=lean)
    assert isinstance(batch, FastDecodeBatch) == lean
    prompts = {i: torch.randint(3, 300, (n,)).tolist() for i, n in enumerate([9, 4, 15, 7, 12])}
    done = {}
    for i in (0, 1):
        batch.add(i, prompts[i])
    step = 0
    while batch or len(done) < 7:
        if step == 2:
            batch.add(2, prompts[2])
        if step == 3:
            batch.add(3, prompts[3])
            batch.add(4, prompts[4])
        for f in batch.step():
            done[f.key] = f
            if f.key in (0, 2):     # the dialogue's next turn: the earlier context + new tokens, from its cache
                key = f.key + 10
                prompts[key] = prompts[f.key] + f.completion + [17, 23, 5]
                batch.add(key, prompts[key], f.cache)
        step += 1
    assert sorted(done) == [0, 1, 2, 3, 4, 10, 12]
    for key, f in done.items():
        ids = torch.tensor([prompts[key] + f.completion])
        with torch.no_grad():
            logp = model(input_ids=ids).logits[0, len(prompts[key]) - 1:-1].log_softmax(-1)
        fresh = logp.gather(-1, torch.tensor(f.completion)[:, None]).squeeze(-1)
        assert torch.allclose(fresh, torch.tensor(f.logprobs), atol=1e-4)
        assert f.cache.ids == prompts[key] + f.completion[:-1] and f.cache.kv.shape[3] == len(f.cache.ids)
    # an emptied batch lets its cache buffers go (an agent kept for later games held its largest batch's: 29 seeds'
    # counterparts in a notebook's design checks filled 24 GB)
    assert (batch.kv if lean else batch.past) is None


def test_sample_categorical_draws_from_the_rows_distribution():
    """Inverse-CDF sampling: each row's frequencies match its (unnormalised) probabilities; zero mass is never drawn."""
    from dialogrl.agents.sampling import sample_categorical

    torch.manual_seed(0)
    probs = torch.tensor([[0.2, 0.0, 0.5, 0.3, 0.0], [0.0, 0.0, 0.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0, 0.0]])
    n = 20000
    draws = sample_categorical(probs.repeat(n, 1)).view(n, 3)
    for r in range(3):
        freq = torch.bincount(draws[:, r], minlength=5).float() / n
        assert torch.allclose(freq, probs[r] / probs[r].sum(), atol=0.015)
        assert (freq[probs[r] == 0] == 0).all()


def test_rows_with_their_own_stream_sample_the_same_in_any_batch(toy):
    """A row with its own random.Random (a game's token stream) draws its tokens from it alone, in both engines: the
    same completion alone or among other rows, and torch's global generator is never touched; sample_categorical's
    per-row draws follow each row's distribution."""
    import random

    from dialogrl.agents.fastdecode import sample_turns
    from dialogrl.agents.sampling import sample_categorical

    model, tok = toy
    args = (model, SEQS, tok.pad_token_id, [tok.eos_token_id], 12, lambda x: x.float().log_softmax(-1))
    for lean in (True, False):
        torch.manual_seed(0)
        before = torch.get_rng_state()
        together, _, _ = sample_turns(*args, lean=lean, rngs=[random.Random(k) for k in range(3)])
        assert torch.equal(torch.get_rng_state(), before)
        alone = [sample_turns(model, [s], *args[2:], lean=lean, rngs=[random.Random(k)])[0][0]
                 for k, s in enumerate(SEQS)]
        assert together == alone
    probs = torch.tensor([[0.2, 0.0, 0.5, 0.3, 0.0], [1.0, 1.0, 1.0, 1.0, 0.0]])
    n = 20000
    rngs = [random.Random(k) for k in range(2 * n)]
    draws = sample_categorical(probs.repeat(n, 1), rngs).view(n, 2)
    for r in range(2):
        freq = torch.bincount(draws[:, r], minlength=5).float() / n
        assert torch.allclose(freq, probs[r] / probs[r].sum(), atol=0.015) and (freq[probs[r] == 0] == 0).all()
    mixed = sample_categorical(probs, [random.Random(0), None])   # a row without a stream: the global generator
    assert mixed.shape == (2,) and mixed[0] == sample_categorical(probs[:1], [random.Random(0)])[0]


@pytest.mark.gpu
def test_bf16_on_cuda_keeps_the_hf_path_and_lean_runs_when_asked(toy_model_dir):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    model, tok = load_model(str(toy_model_dir), device="cuda", bf16=True)
    args = (model, tok.pad_token_id, [tok.eos_token_id], 8, lambda x: x.float().log_softmax(-1))
    assert isinstance(decode_batch(*args), DecodeBatch)
    for lean in (None, True):
        batch = decode_batch(*args, lean=lean)
        batch.add(0, SEQS[0])
        batch.add(1, SEQS[2])
        done = []
        while batch:
            done += batch.step()
        assert sorted(f.key for f in done) == [0, 1] and all(len(f.completion) == len(f.logprobs) for f in done)


# ------------------------------------------------------------------------------ the trainer's packed forward

def test_packed_hidden_states_and_their_gradients_equal_the_hf_decoders(toy):
    """fastdecode.hidden (packed linear layers, LoRA as effective weights with its gradients through the low rank,
    causal SDPA row by row) gives the HF decoder's final hidden states at every real position of rows of different
    lengths, and the same gradients in the adapter."""
    model, _ = toy
    model = add_adapters(model, ["red", "blue"], r=4)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    use_adapter(model, "red")
    lean = LeanModel(model)
    probe = torch.randn(len(SEQS), max(map(len, SEQS)), model.config.hidden_size)   # a loss that reads every position
    lora = {n: p for n, p in model.named_parameters() if ".red." in n and "lora_" in n}
    assert lora and all(p.requires_grad for p in lora.values())

    def grads(hidden_fn):
        model.zero_grad(set_to_none=True)
        h = hidden_fn()
        (h * probe[:, :h.shape[1]]).sum().backward()
        return h.detach(), {n: p.grad.clone() for n, p in lora.items()}

    def hf():   # each row alone: no padding at all
        rows = [model.get_decoder()(input_ids=torch.tensor([s]), use_cache=False).last_hidden_state[0] for s in SEQS]
        out = torch.zeros(len(SEQS), max(map(len, SEQS)), model.config.hidden_size)
        for i, r in enumerate(rows):
            out[i, :len(SEQS[i])] = r
        return out

    h_lean, g_lean = grads(lambda: hidden(lean, SEQS))
    h_hf, g_hf = grads(hf)
    assert torch.allclose(h_lean, h_hf, atol=1e-5)
    for n in lora:
        torch.testing.assert_close(g_lean[n], g_hf[n], atol=1e-4, rtol=1e-4, msg=n)
    assert any(g.abs().sum() > 0 for g in g_lean.values())
    with torch.no_grad():                        # without grad: the cached weights, the same numbers
        assert torch.allclose(hidden(lean, SEQS), h_hf, atol=1e-5)
        with base_model(model):                  # the KL's reference: adapters off
            ref = hidden(lean, SEQS)
            assert torch.allclose(ref[0, :len(SEQS[0])], model.get_decoder()(
                input_ids=torch.tensor([SEQS[0]]), use_cache=False).last_hidden_state[0], atol=1e-5)


def test_lora_dropout_keeps_the_models_own_forward(toy_model_dir):
    model, _ = load_model(str(toy_model_dir), device="cpu", adapters=["a"], lora_dropout=0.1)
    assert lean_supported(model) and not lean_trainable(model)
    model, _ = load_model(str(toy_model_dir), device="cpu", adapters=["a"])
    assert lean_trainable(model)


def test_a_trainable_base_weight_gets_its_gradient_in_the_packed_forward(toy):
    """Where a base weight trains too (not only the adapters), `hidden` builds that layer's weight in the graph:
    its gradient equals the HF decoder's (the low-rank backward would have none for it)."""
    model, _ = toy
    model = add_adapters(model, ["red"], r=4)
    use_adapter(model, "red")
    down = model.get_decoder().layers[0].mlp.down_proj.base_layer.weight
    down.requires_grad_(True)
    lean, probe = LeanModel(model), torch.randn(len(SEQS), max(map(len, SEQS)), model.config.hidden_size)
    try:
        hidden_grads = []
        for fn in (lambda: hidden(lean, SEQS),
                   lambda: torch.nn.utils.rnn.pad_sequence([model.get_decoder()(
                       input_ids=torch.tensor([s]), use_cache=False).last_hidden_state[0] for s in SEQS],
                       batch_first=True)):
            model.zero_grad(set_to_none=True)
            h = fn()
            (h * probe[:, :h.shape[1]]).sum().backward()
            hidden_grads.append(down.grad.clone())
    finally:
        down.requires_grad_(False)
    assert hidden_grads[0].abs().sum() > 0
    torch.testing.assert_close(hidden_grads[0], hidden_grads[1], atol=1e-4, rtol=1e-4)
