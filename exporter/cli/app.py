"""The typer applications the command modules register on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="edge-export",
    help="Pinned checkpoints to quantized, shape-bucketed, parity-verified and signed edge artifacts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
targets_app = typer.Typer(help="The target registry: device profiles keyed by capability.", invoke_without_command=True)
app.add_typer(targets_app, name="targets")
hub_app = typer.Typer(help="Qualcomm AI Hub: devices, and validation of a bundle on a real device (signed device-validation record).",
                       no_args_is_help=True)
app.add_typer(hub_app, name="hub")
