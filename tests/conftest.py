import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def key_dir(tmp_path_factory):
    """Every test signs with a throwaway development key, never the user's."""
    d = tmp_path_factory.mktemp("keys")
    old = os.environ.get("EDGE_EXPORT_KEY_DIR")
    os.environ["EDGE_EXPORT_KEY_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("EDGE_EXPORT_KEY_DIR", None)
    else:
        os.environ["EDGE_EXPORT_KEY_DIR"] = old


@pytest.fixture(scope="session")
def dev_keys(key_dir):
    from manifests.signing import dev_key

    return dev_key(notice=lambda m: None)


@pytest.fixture(scope="session")
def out_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="session")
def built(out_root, dev_keys):
    """tiny-lm built once for both targets; returns {(target, precision): BuildResult}."""
    from exporter.pipeline import build

    results = {}
    for target in ("cpu", "qcs6490"):
        for r in build("tiny-lm", target, out_root=out_root):
            results[(target, r.precision)] = r
    return results


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory):
    """The tiny MiniCPM-o twin, written by the CLI (which checks its digests against the recipe's pin)."""
    d = tmp_path_factory.mktemp("ckpt") / "tiny-minicpm-o"
    p = subprocess.run([sys.executable, "-m", "exporter", "synthesize", "tiny-minicpm-o", str(d)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return d
