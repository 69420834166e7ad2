"""Multimodal chains through exported bundles, opened only through the load gate (no torch here).

An encoder bundle (``minicpm-o.vision`` / ``minicpm-o.audio``) turns its input into embedding rows; a
decoder bundle (``minicpm-o.language``) takes a prompt whose placeholder positions carry those rows
(the layout's ``inject`` rule) and decodes greedily through verify/split_lm_driver.py. This is what a
runtime does with the bundles; the tests compare its tokens with the torch reference's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from verify import gate


class Chain:
    """Gate-checked sessions of an encoder bundle and a language bundle for one target."""

    def __init__(self, public_key: str | Path, target: str):
        self.key, self.target = public_key, target

    def encode(self, bundle: str | Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """[rows, hidden] embedding rows of one encoder input."""
        opened = gate.check_bundle(bundle, self.key, self.target)
        (comp,) = opened.manifest["components"]
        sess = gate.open_session(bundle, self.key, self.target, comp["name"])
        out = sess.run([comp["outputs"][0]["name"]], {t["name"]: feeds[t["name"]] for t in comp["inputs"]})[0]
        return out[0]

    def generate(self, bundle: str | Path, prefix: list[int], rows: np.ndarray, suffix: list[int], steps: int,
                 forced: list[int] | None = None, with_logits: bool = False):
        """Greedy tokens after `prefix` + rows + `suffix` through the language bundle's graphs (with `forced`,
        teacher-forced: those tokens are fed back and the graphs' own argmax at each step is returned); with
        `with_logits`, (tokens, the logits of every step)."""
        from verify import split_lm_driver as drv

        opened = gate.check_bundle(bundle, self.key, self.target)
        m = opened.manifest
        layout = m["state_layout"]
        placeholder = layout["placeholder_token"]
        comps = [c for c in m["components"] if c["role"] != "encoder"]
        runners = {c["name"]: gate.open_session(bundle, self.key, self.target, c["name"]) for c in comps}
        graphs = {c["name"]: drv.GraphSpec.from_manifest_component(c) for c in comps}
        tokens, inject = drv.placeholder_prompt(prefix, rows, suffix, placeholder)
        out, logits = drv.generate(runners, graphs, layout, tokens, steps, forced=forced, inject=inject)
        return (out, logits) if with_logits else out
