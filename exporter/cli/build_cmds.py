"""Commands that build and check bundles: recipe, verify, synthesize, pin."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from exporter.cli.app import app
from exporter.cli.options import DEFAULT_OUT, JSON_OPT, CONTEXT_OPT, RAM_OPT, FORMAT_OPT, MAX_MEMORY_OPT, SHARE_OPT, public_key_or_dev
from exporter.cli.render import out_console, print_json, RichReporter


@app.command("recipe")
def recipe_cmd(
    name: str = typer.Argument(..., help="Recipe name (see `edge-export recipes`); FAMILY.GROUP builds one group of a multi-component recipe (minicpm-o.vision)."),
    target: str = typer.Option(..., "--target", "-t", help="Target name or alias (see `edge-export targets`)."),
    precision: Optional[str] = typer.Option(None, "--precision", "-p", help="Build only this precision (default: every precision the recipe defines for the target)."),
    out: Path = typer.Option(DEFAULT_OUT, "--out", "-o", help="Output root; bundles go to OUT/RECIPE/TARGET/PRECISION."),
    key: Optional[Path] = typer.Option(None, "--key", help="EC private key (PEM) to sign with; default: a local development key, created on first use."),
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="Use this checkpoint directory instead of the recipe's source (the pin is still checked)."),
    allow_unpinned: bool = typer.Option(False, "--allow-unpinned", help="Build even if checkpoint digests differ from the pin; the manifest records it."),
    pin: Optional[Path] = typer.Option(None, "--pin", help="A reviewed pin file (`edge-export pin`) the --checkpoint must match file by file; the manifest records its digest."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Stage cache directory (default OUT/.cache)."),
    context: Optional[int] = CONTEXT_OPT,
    ram: Optional[float] = RAM_OPT,
    fmt: Optional[str] = FORMAT_OPT,
    max_memory: Optional[float] = MAX_MEMORY_OPT,
    share: bool = SHARE_OPT,
    as_json: bool = JSON_OPT,
):
    """Plan, then build, verify and sign the bundles of recipe NAME for one target.

    The plan runs first: a rejection or a missing prerequisite is printed, recorded as
    OUT/RECIPE/TARGET/PRECISION.record.json (where `edge-export matrix` reads it) and
    exits 4 or 6 before any heavy work. Every outcome, success included, is recorded.
    A multi-component recipe (minicpm-o) plans and builds each component group as its
    own bundle, OUT/RECIPE.GROUP/TARGET/PRECISION, recording the groups it cannot build;
    it exits 0 if at least one group was built and none failed.
    """
    from rich.markup import escape

    from exporter.pipeline import build

    reporter = RichReporter(quiet=as_json)
    t = time.perf_counter()
    results = build(name, target, precision, ram_gib=ram, out_root=out, key=key, checkpoint=checkpoint, pin=pin,
                    allow_unpinned=allow_unpinned, cache_root=cache, reporter=reporter, context=context, fmt=fmt, max_memory_gib=max_memory,
                    share_weights=share, command=" ".join(["edge-export", *sys.argv[1:]]))
    failed = [r for r in results if r.status in ("parity-failed", "failed")]
    built = [r for r in results if r.status in ("published", "up-to-date")]
    if as_json:
        print_json({"results": [r.to_json() for r in results], "wall_s": round(time.perf_counter() - t, 2)})
    else:
        con = out_console()
        for r in results:
            if r.status == "parity-failed":
                f = r.parity["first_failure"]
                con.print(f"[red]✗ {r.recipe}/{r.target}/{r.precision}: parity FAILED[/red] at stage {f['stage']}, "
                          f"component {f['component']}, {f['output']} {f['metric']} = {f['value']:.4g} (threshold {f['threshold']}); "
                          f"nothing published; report: {r.bundle / 'parity.md'}")
            elif r.status == "failed":
                con.print(f"[red]✗ {r.recipe}/{r.target}/{r.precision}: build failed[/red]: {escape(r.parity.get('reason', ''))}; recorded in {r.bundle}")
            elif r.status in ("rejected", "missing-prerequisite"):
                con.print(f"[yellow]– {r.recipe}/{r.target}/{r.precision}: {r.status}[/yellow]: {escape(r.parity.get('reason', ''))}")
            else:
                con.print(f"[green]✓ {r.recipe}/{r.target}/{r.precision}[/green] {r.status}: {r.bundle}")
    if failed:
        raise typer.Exit(3)
    if not built:  # a multi-component recipe of which no group could be built
        raise typer.Exit(4 if any(r.status == "rejected" for r in results) else 6)


@app.command("verify")
def verify_cmd(
    bundle: Path = typer.Argument(..., help="Bundle directory (holds manifest.json and model.sig)."),
    public_key: Optional[Path] = typer.Option(None, "--public-key", help="Signer's public key (PEM); default: the local development key."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target the runtime is; default: the bundle's own target."),
    open_sessions: bool = typer.Option(False, "--open", help="Also open every component through the gate on its execution provider."),
    as_json: bool = JSON_OPT,
):
    """Check a bundle as the load gate does: signature, digests, target, parity verdict."""
    from verify import gate

    key = public_key_or_dev(public_key)  # verifying never creates key material
    if key is None:
        from exporter.errors import UsageError

        raise UsageError("no public key to verify the signature with: --public-key was not given and no local development key exists",
                         "pass --public-key SIGNER.pub.pem (the key the bundle names in manifest.json signing.public_key_sha256)")
    opened = gate.check_bundle(bundle, key, target)  # the bundle's own target unless one is given; read after its signature
    tgt = opened.manifest["bundle"]["target"] if target is None else target
    if open_sessions:
        for c in opened.manifest["components"]:
            gate.open_session(bundle, key, tgt, c["name"])
    p = opened.manifest["parity"]
    info = {"bundle": str(bundle), "target": tgt, "verdict": p["verdict"], "signature": "valid", "files": len(opened.manifest["files"]),
            "stages": [{k: s[k] for k in ("stage", "verdict", "provider")} for s in p["stages"]], "sessions_opened": open_sessions,
            "verification": opened.manifest.get("verification", {})}
    if as_json:
        print_json(info)
    else:
        out_console().print(f"[green]✓[/green] {bundle}: signature valid, {info['files']} files match, target {tgt}, parity {p['verdict']}"
                             + (" , every component opened on its execution provider" if open_sessions else ""))
        if info["verification"].get("emulated"):
            from rich.markup import escape

            out_console().print(f"  [yellow]placement unqualified:[/yellow] {escape(info['verification']['note'])}")


@app.command("synthesize")
def synthesize_cmd(
    name: str = typer.Argument(..., help="An embedded recipe that synthesises its checkpoint (tiny-lm, tiny-spark, tiny-minicpm-o)."),
    out: Path = typer.Argument(..., help="Directory to write config.json and model.safetensors into (must not exist)."),
):
    """Write the seeded checkpoint of an embedded tiny recipe (real class and tensor names), checked against its pin."""
    from exporter.atomic import staging_dir
    from exporter.errors import IntegrityError, UsageError
    from exporter.hashing import sha256_file
    from recipes import get_recipe

    r = get_recipe(name)
    if r.synthesize is None:
        raise UsageError(f"recipe {name} has no synthesiser", "choose tiny-lm, tiny-spark or tiny-minicpm-o")
    if out.exists():
        raise UsageError(f"{out} exists", "choose a new directory; nothing is overwritten")
    with staging_dir(out) as tmp:
        r.synthesize(tmp)
        bad = [f for f, d in r.pin.files.items() if sha256_file(tmp / f) != d]
        if bad:
            raise IntegrityError(f"synthesised {bad} do not match the pin of {name}", "report this: synthesis must be deterministic")
    out_console().print(f"wrote {out} ({', '.join(sorted(r.pin.files))}; digests match the pin of {name})")


@app.command("pin")
def pin_cmd(
    name: str = typer.Argument(..., help="The recipe the checkpoint is for (spark, minicpm-o, tiny-lm, ...)."),
    checkpoint: Path = typer.Option(..., "--checkpoint", help="The snapshot directory: config.json and *.safetensors (sharded or not), or a "
                                    "Hugging Face cache snapshot .../models--ORG--NAME/snapshots/REV/."),
    revision: Optional[str] = typer.Option(None, "--revision", help="The upstream revision (commit) of a plain directory; read from the path for a cache snapshot."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Pin file to write (default: NAME.pin.json here); never overwritten unless --force."),
    force: bool = typer.Option(False, "--force", help="Replace an existing pin file."),
    as_json: bool = JSON_OPT,
):
    """Check a checkpoint against a recipe and write a pin file a team can review and commit.

    Checked before anything is loaded: the config against the recipe, every safetensors header, every tensor name and
    shape against the recipe's layout, the shard index against the shards, no pickle read, no code executed, no
    symbolic link out of the snapshot. The pin records the source, the revision and the SHA-256 and size of every file
    the loader reads. Build with it: `edge-export recipe NAME --checkpoint DIR --pin FILE`.
    Exit 0: written; 2: usage (wrong recipe, config of another family); 5: the checkpoint fails a check.
    """
    from exporter.atomic import write_text_atomic
    from exporter.errors import UsageError
    from exporter.pins import make_pin

    output = output or Path(f"{name}.pin.json")
    if output.exists() and not force:
        raise UsageError(f"{output} exists", "choose another --output, or pass --force to replace it")
    reporter = RichReporter(quiet=as_json)
    with reporter.stage("pin", f"{name}: {checkpoint} (headers, layout, SHA-256 of every file read)"):
        pin = make_pin(name, checkpoint, revision)
    write_text_atomic(output, json.dumps(pin, indent=2, sort_keys=True) + "\n")
    from exporter.hashing import sha256_file

    digest = sha256_file(output)
    if as_json:
        print_json({"pin": str(output), "sha256": digest, **pin})
        return
    lay = pin["layout"]
    con = out_console()
    con.print(f"wrote {output} (sha256 {digest[:16]}…): {pin['recipe']} from {pin['source']} at {pin['revision']}", highlight=False)
    con.print(f"  {len(pin['files'])} files read, {sum(f['size'] for f in pin['files'].values()) / 2**30:.2f} GiB; {lay['tensors']} tensors "
              f"({lay['parameters']:,} parameters, {', '.join(f'{k} {v}' for k, v in lay['dtypes'].items())}) match the layout of {lay['checked_by']}",
              highlight=False)
    for e in pin["excluded"]:
        con.print(f"  not read: {e['file']} ({e['reason']})", highlight=False)
    for n in pin["notes"]:
        con.print(f"  note: {n}", highlight=False)
    con.print(f"  build: edge-export recipe {pin['recipe']} --target T --checkpoint {checkpoint} --pin {output}", highlight=False)
