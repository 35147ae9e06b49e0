"""The Hugging Face hub: what names a hub id, and whether the hub can be reached from here."""
from __future__ import annotations

import re
import socket
from urllib.parse import urlparse

HUB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_reachable(timeout: float = 3.0) -> bool:
    """True when the Hugging Face hub answers a TCP connection within `timeout` (and offline mode is off)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


# The hub models the `gpu` profiles name, as their config.json files give them (the sizes that set memory and time;
# the weights are not needed to measure either): `models.hub_shaped_model` builds a model of this shape with random
# weights, offline, for the GPU checks and the memory model.
HUB_CONFIGS: dict[str, dict] = {
    "Qwen/Qwen2.5-0.5B-Instruct": {
        "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": True},
    "Qwen/Qwen2.5-1.5B-Instruct": {
        "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
        "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": True},
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": {
        "model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 49152, "max_position_embeddings": 8192,
        "rope_theta": 130000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": True},
}


def hub_config(hub_id: str, **overrides):
    """The transformers config of a hub model in HUB_CONFIGS (overrides: e.g. num_hidden_layers=2 for a toy)."""
    from transformers import AutoConfig

    if hub_id not in HUB_CONFIGS:
        raise ValueError(f"no committed config for {hub_id!r}; known: {', '.join(HUB_CONFIGS)}")
    spec = {**HUB_CONFIGS[hub_id], **overrides}
    return AutoConfig.for_model(spec.pop("model_type"), **spec)


def head_dim(config) -> int:
    """An attention head's width: the config's head_dim, or hidden size / heads where it has none."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def kv_bytes_per_token(config, bytes_per_value: int = 2) -> int:
    """The KV cache one token takes in every layer: layers x (key, value) x kv heads x head dim x bytes."""
    return config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim(config) * bytes_per_value
