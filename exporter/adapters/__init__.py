"""Family adapters by registry key: what a recipe's `adapter` names.

An adapter (exporter/adapters/base.py) is everything a family needs from its checkpoint to its parity figures: loading
by upstream tensor names, the step module of each component, calibration and held-out data, the torch reference, and
the measurement of one parity stage. Entries are imported on demand; adding a family kind is one module and one line.
"""

from __future__ import annotations

import importlib

from exporter.errors import UnknownNameError

REGISTRY: dict[str, str] = {
    "decoder-lm": "exporter.adapters.decoder_lm:DecoderLM",
    "minicpm-o.vision": "exporter.adapters.minicpmo:Vision",
    "minicpm-o.audio": "exporter.adapters.minicpmo:Audio",
    "minicpm-o.language": "exporter.adapters.minicpmo:Language",
    "minicpm-o.speech-decoder": "exporter.adapters.minicpmo:SpeechDecoder",
}


def adapter_class(key: str):
    if key not in REGISTRY:
        raise UnknownNameError("family adapter", key, sorted(REGISTRY))
    module, _, attr = REGISTRY[key].partition(":")
    return getattr(importlib.import_module(module), attr)


def bind(key: str, build):
    """The adapter `key` for one build."""
    return adapter_class(key)(build)
