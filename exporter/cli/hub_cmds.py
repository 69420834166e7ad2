"""Qualcomm AI Hub commands: hub devices, hub validate."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from exporter.cli.app import hub_app
from exporter.cli.options import JSON_OPT, PUBLIC_KEY_OPT, SIMULATE_OPT
from exporter.cli.render import out_console, Table, print_json, RichReporter


@hub_app.command("devices")
def hub_devices_cmd(
    chipset: Optional[str] = typer.Option(None, "--chipset", help="Only devices with this chipset attribute (e.g. qualcomm-qcs6490)."),
    simulate: bool = SIMULATE_OPT,
    as_json: bool = JSON_OPT,
):
    """List AI Hub devices (name, OS, chipset, Hexagon version, soc-model)."""
    from exporter.hub import make_client

    client = make_client(simulate)
    client.check_reachable(timeout_s=5.0)
    rows = [d.to_json() for d in client.devices(chipset)]
    if as_json:
        print_json({"source": client.source, "simulated": client.simulated, "devices": rows})
        return

    t = Table("device", "os", "chipset", "hexagon", "soc-model", title=f"{client.source}{' (simulated)' if client.simulated else ''}")
    for r in rows:
        t.add_row(r["name"], r["os"] or "-", str(r["chipset"]), str(r["hexagon"]), str(r["soc_model"]))
    out_console().print(t)


@hub_app.command("validate")
def hub_validate_cmd(
    bundle: Path = typer.Argument(..., help="A verified QNN bundle directory."),
    device: Optional[str] = typer.Option(None, "--device", help="AI Hub device name (default: chosen by the target's chipset attribute)."),
    chipset: Optional[str] = typer.Option(None, "--chipset", help="Chipset attribute to choose the device by (default: the bundle target's)."),
    samples: int = typer.Option(6, "--samples", min=1, help="Held-out calls per graph sent to the device."),
    timeout: float = typer.Option(3600.0, "--timeout", help="Seconds to wait for all jobs; past it the job ids stay saved and a rerun resumes."),
    poll: float = typer.Option(15.0, "--poll", help="Seconds between status checks."),
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="The checkpoint the bundle was built from (default: the recipe's source), for the torch reference."),
    key: Optional[Path] = typer.Option(None, "--key", help="EC private key to sign the record with; default: the local development key."),
    public_key: Optional[Path] = PUBLIC_KEY_OPT,
    simulate: bool = SIMULATE_OPT,
    as_json: bool = JSON_OPT,
):
    """Validate BUNDLE on an AI Hub device: compile (pinned QAIRT), profile, run the held-out inputs,
    compare with the torch reference under the bundle's thresholds; write BUNDLE.device-validation.json.

    Exit 0: validated; 3: the device run failed or missed a threshold (recorded); 6: no token, no network
    or no qai_hub; 8: a job outlived --timeout (rerun to resume, nothing is resubmitted).
    """
    from exporter.hub import make_client
    from exporter.hub.validate import ValidateOptions, validate
    from manifests.signing import resolve_key

    keys = resolve_key(key)
    pub = public_key or keys.public
    client = make_client(simulate, store=Path(bundle).parent / ".hub-replay")
    record = validate(bundle, client, ValidateOptions(public_key=pub, private_key=keys.private, device=device, chipset=chipset,
                                                      samples=samples, timeout_s=timeout, poll_s=poll, checkpoint=checkpoint),
                      reporter=RichReporter(quiet=as_json))
    if as_json:
        print_json(record)
    else:
        from exporter.hub.records import record_path

        label = " (SIMULATED: replayed on the local HTP simulator, not a device)" if record["simulated"] else ""
        out_console().print(f"[green]✓[/green] {bundle} validated on {record['device']['name']}{label}: verdict {record['verdict']}; "
                             f"record {record_path(bundle)}", highlight=False)
