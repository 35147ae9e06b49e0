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
