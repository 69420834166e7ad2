"""Options shared by several commands: one name, one meaning (`--format` is always an artifact format; how a
result is rendered is `--as`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

DEFAULT_OUT = Path("artifacts")
JSON_OPT = typer.Option(False, "--json", help="Machine-readable JSON on stdout.")
CONTEXT_OPT = typer.Option(None, "--context", "-c", help="Largest context bucket to build (must be one of the recipe's buckets; never shortened silently).")
RAM_OPT = typer.Option(None, "--ram", help="Plan for this RAM SKU of the target, in GiB (one the registry lists).")
MAX_MEMORY_OPT = typer.Option(None, "--max-memory", help="Memory the build may use, in GiB (default: what the host has available, less 10 %); "
                              "cuts a stack into parts that fit it and bounds verify; a build estimated above it is not started: build-memory, a missing prerequisite (exit 6).")
SHARE_OPT = typer.Option(True, "--weight-sharing/--no-weight-sharing",
                         help="On QNN HTP v73+ targets, ship each weight set's graphs in one weight-shared context binary (weights counted once; "
                              "parity measured on per-graph contexts; the shared load is verified on a device only, the x86 simulator cannot open it). "
                              "--no-weight-sharing: every graph carries its own weights, counted so by the plan, and loads on the simulator.")
FORMAT_OPT = typer.Option(None, "--format", "-f", help="Artifact format (default: the target's first).")
AUDIT_EXIT = 7  # an audit with failing bundles
PUBLIC_KEY_OPT = typer.Option(None, "--public-key", help="Signer's public key (PEM); default: the local development key, if one exists.")
POLICY_OPT = typer.Option(None, "--policy", help="Policy file (TOML or JSON) that tightens the release policy; see docs/AUDIT.md.")
SIMULATE_OPT = typer.Option(False, "--simulate", help="Use the replay instead of AI Hub: jobs run on the local HTP simulator and every result is labelled simulated.")


def public_key_or_dev(public_key: Optional[Path]) -> Optional[Path]:
    """The given key, else the local development public key if one exists (never created here)."""
    if public_key is not None:
        return public_key
    from manifests.signing import DEV_KEY_NAME, key_dir, public_path_for

    pub = public_path_for(key_dir() / DEV_KEY_NAME)
    return pub if pub.exists() else None
