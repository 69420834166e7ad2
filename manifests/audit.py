"""Auditing bundles: integrity, declared pins, plan consistency, placement, parity policy, checkpoint pin.

Torch-free and numpy-free: an auditor runs this with the core install. Every check of every bundle
runs (nothing stops at the first failure), and each result names the bundle, the check, what was
wrong and what to do. The gate (verify.gate) is the runtime's subset of these checks.

Checks, by id:

* ``signature``  model-signing signature valid for the given public key, by an allowed signer (checked first: a
                 bundle whose signature fails is not parsed further);
* ``manifest``   read safely (size, nesting, duplicate keys, no NaN), schema-valid, every field stated twice
                 agreeing, every path inside the bundle;
* ``files``      every listed file streamed and matched to its digest and size; none added, none missing;
* ``references`` every file a graph refers to (external data, an EPContext binary) is a signed file inside the bundle;
* ``pins``       the tool versions in the manifest equal the exact pins this edge-export declares
                 (pyproject.toml, read from the installed distribution) or those of the policy;
* ``plan``       bundle precision and format equal the plan's, the plan admitted it, and the bundle
                 holds exactly the planned graphs in that format;
* ``placement``  every component ran entirely on the declared execution provider (ExecuTorch: its
                 delegate, with only allow-listed operators left to portable kernels);
* ``parity``     published with verdict pass; every stage's thresholds no looser than the recipe's
                 (tightened by the policy); the recorded figures re-judged against those; the last
                 stage ran on the target's own provider;
* ``checkpoint`` the checkpoint matched its pin (a bundle built with --allow-unpinned fails);
                 synthetic checkpoints fail where the policy says so;
* ``device-validation`` the AI Hub record beside the bundle, if any, is signed, bound to this build
                 and passed; a simulated (replayed) record is reported as simulator-only and never
                 satisfies ``require_device_validation``.
* ``host-isa``   CPU targets: the host that measured parity was at the target's ISA baseline, or its
                 extra features cannot change the verdict (the quantization scheme proves its kernels
                 ISA-independent); otherwise a *finding* (reported, failing under
                 ``require_baseline_host``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from exporter.errors import EdgeExportError, UsageError
from manifests import manifest as mf

CHECKS = ("manifest", "signature", "files", "references", "pins", "plan", "placement", "parity", "checkpoint", "device-validation", "host-isa")


@dataclass(frozen=True)
class Check:
    id: str
    ok: bool
    message: str
    fix: str = ""
    details: tuple = ()  # every individual finding, for machines (and JUnit)
    finding: bool = False  # passes, but a reader should know (e.g. verified on a host above the target's ISA baseline)

    def to_json(self) -> dict:
        return {"id": self.id, "ok": self.ok, "message": self.message, "fix": self.fix, "details": list(self.details), "finding": self.finding}


@dataclass(frozen=True)
class BundleAudit:
    path: Path
    checks: tuple[Check, ...]
    cell: dict = field(default_factory=dict)  # recipe / target / precision / format, where readable
    manifest: dict | None = field(default=None, repr=False)  # as read and validated by the audit (reports reuse it)
    parity_stages: list | None = field(default=None, repr=False)  # the full parity.json stages, where readable

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failing(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_json(self) -> dict:
        return {"bundle": str(self.path), "ok": self.ok, "cell": self.cell, "checks": [c.to_json() for c in self.checks]}


@dataclass(frozen=True)
class Policy:
    """What a bundle must satisfy. The default is the release policy; a policy file may only tighten
    the recipe's thresholds (the stricter of the two applies), never loosen them."""

    name: str = "release"
    require_pinned_checkpoint: bool = True
    allow_synthetic_checkpoint: bool = True
    require_published: bool = True
    require_device_validation: bool = False  # a passing, non-simulated AI Hub record beside the bundle
    require_placement: bool = False  # placement measured on the target's own EP (not an emulation on the CPU)
    require_baseline_host: bool = False  # CPU targets: parity measured at the ISA baseline, or by ISA-independent kernels
    thresholds: dict = field(default_factory=dict)  # precision (or "*") -> metric -> value
    tools: dict = field(default_factory=dict)  # tool -> exact version required (overrides the declared pins)
    signers: tuple[str, ...] = ()  # allowed public-key SHA-256 fingerprints; empty: the key given
    # SHA-256 digests of the reviewed pin files a checkpoint may be pinned by (a policy file may name the pin files
    # themselves, relative to it); empty: any pin file (the recipes' own embedded pins are always trusted)
    trusted_pins: tuple[str, ...] = ()
    source: str = "built-in release policy"

    def to_json(self) -> dict:
        return {"name": self.name, "require_pinned_checkpoint": self.require_pinned_checkpoint,
                "allow_synthetic_checkpoint": self.allow_synthetic_checkpoint, "require_published": self.require_published,
                "require_device_validation": self.require_device_validation, "require_placement": self.require_placement,
                "require_baseline_host": self.require_baseline_host, "thresholds": self.thresholds, "tools": self.tools, "signers": list(self.signers), "trusted_pins": list(self.trusted_pins),
                "source": self.source}


POLICY_KEYS = {"name", "require_pinned_checkpoint", "allow_synthetic_checkpoint", "require_published", "require_device_validation", "require_placement",
               "require_baseline_host", "thresholds", "tools", "signers", "trusted_pins"}


def load_policy(path: Path | None) -> Policy:
    """A policy file, TOML or JSON, with the keys of Policy (unknown keys are an error, not ignored)."""
    if path is None:
        return Policy()
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"policy file {path} does not exist", "pass a TOML or JSON file (see docs/AUDIT.md)")
    from exporter.safejson import JsonRefused, load_json

    try:
        data = load_json(path, "the policy", 1 << 20) if path.suffix == ".json" else tomllib.loads(path.read_text())
    except (JsonRefused, tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise UsageError(f"policy file {path} does not parse: {getattr(e, 'message', e)}", "fix its syntax (TOML, or JSON for a .json file)") from None
    if not isinstance(data, dict):
        raise UsageError(f"policy file {path} is not a table of keys", "see docs/AUDIT.md")
    unknown = sorted(set(data) - POLICY_KEYS)
    if unknown:
        raise UsageError(f"policy file {path}: unknown keys {unknown}", f"known keys: {sorted(POLICY_KEYS)}")
    from verify.thresholds import METRICS

    for prec, th in data.get("thresholds", {}).items():
        bad = sorted(set(th) - set(METRICS))
        if bad or not all(isinstance(v, (int, float)) for v in th.values()):
            raise UsageError(f"policy file {path}: thresholds.{prec} has unknown metrics {bad} or non-numbers", f"metrics: {list(METRICS)}")
    return Policy(**{**{k: v for k, v in data.items() if k not in ("signers", "trusted_pins")}, "signers": tuple(data.get("signers", ())),
                     "trusted_pins": _trusted_pins(path, data.get("trusted_pins", ()))}, source=str(path))


def _trusted_pins(policy_path: Path, entries) -> tuple[str, ...]:
    """Each entry a pin file's SHA-256, or the path of a pin file (relative to the policy file) whose digest is taken."""
    import re

    from exporter.hashing import sha256_file

    if not isinstance(entries, (list, tuple)) or not all(isinstance(e, str) for e in entries):
        raise UsageError(f"policy file {policy_path}: trusted_pins is not a list of strings", "list pin-file SHA-256 digests or pin file paths")
    out = []
    for e in entries:
        if re.fullmatch(r"[0-9a-f]{64}", e):
            out.append(e)
            continue
        p = (policy_path.parent / e) if not Path(e).is_absolute() else Path(e)
        if not p.is_file():
            raise UsageError(f"policy file {policy_path}: trusted pin {e!r} is neither a SHA-256 nor a pin file ({p} does not exist)",
                             "list pin-file SHA-256 digests or paths of committed pin files")
        out.append(sha256_file(p))
    return tuple(out)


def declared_pins() -> dict[str, str]:
    """Exact ``==`` pins this edge-export declares for the tools manifests record (all extras)."""
    import re
    from importlib import metadata

    from exporter.versions import TOOLS

    pins = {}
    for req in metadata.requires("edge-export") or []:
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^;\s]+)", req)
        if m and m.group(1).lower() in TOOLS:
            pins[m.group(1).lower()] = m.group(2)
    pins["edge-export"] = metadata.version("edge-export")
    return pins


def find_bundles(paths) -> list[Path]:
    """Every bundle (a directory holding manifest.json) at or under the given paths, sorted. Below a path, hidden
    directories are never searched: the stage cache (.cache), a build's staging (.tmp-*) and superseded (.old-*)
    directories, EP caches (.NAME.cache): a half-signed or replaced bundle is never taken for one."""
    import os

    found = []
    for p in map(Path, paths):
        if not p.exists():
            raise UsageError(f"{p} does not exist", "pass bundle directories or a directory that holds them")
        if (p / mf.MANIFEST).is_file():
            found.append(p)
        elif p.is_dir():
            for root, dirs, files in os.walk(p, followlinks=False):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                if mf.MANIFEST in files:
                    found.append(Path(root))
    return sorted(dict.fromkeys(found))


# -- the checks ---------------------------------------------------------------------------------------


def _verify_signature(bundle: Path, public_key: Path | None) -> tuple[Check, dict]:
    """The signature over every file, checked before the manifest is parsed; returns the signed per-file digests
    (the files check then reads no byte twice)."""
    from manifests.signing import verify_bundle

    if public_key is None:
        return Check("signature", False, "no public key to verify the signature with",
                     "pass --public-key (the signer's .pub.pem), or build with the local development key first"), {}
    try:
        digests = verify_bundle(bundle, Path(public_key))
    except EdgeExportError as e:
        return Check("signature", False, e.message, e.hint), {}
    return Check("signature", True, "valid"), digests


def _check_signer(data: dict, public_key: Path, policy: Policy) -> Check:
    from manifests.signing import public_key_fingerprint

    fp = public_key_fingerprint(Path(public_key))
    if data["signing"].get("public_key_sha256") != fp:
        return Check("signature", False, f"the manifest names signer {data['signing'].get('public_key_sha256')}, the signature verifies with {fp}",
                     "rebuild; a manifest that misstates its signer is not trusted")
    if policy.signers and fp not in policy.signers:
        return Check("signature", False, f"signer {fp[:16]}… is not among the policy's allowed signers", "sign with a release key the policy lists")
    return Check("signature", True, f"valid, signer {fp[:16]}…")


def _check_references(bundle: Path, data: dict) -> Check:
    from manifests.onnx_refs import reference_findings

    graphs = sorted(rel for rel in data["files"] if rel.endswith(".onnx"))
    found = [f for rel in graphs for f in reference_findings(bundle, rel, data["files"])]
    if found:
        return Check("references", False, "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else ""),
                     "rebuild the bundle; a signed graph keeps its external data and context binaries inside it", tuple(found))
    return Check("references", True, f"every file the {len(graphs)} graphs refer to is a signed file inside the bundle")


def _check_files(bundle: Path, data: dict, signed: dict | None = None) -> Check:
    found = mf.file_findings(bundle, data, signed)
    if found:
        return Check("files", False, "; ".join(f"{f['file']}: {f['problem']}" for f in found),
                     "the bundle was altered after signing: rebuild it (never edit a bundle)", tuple(found))
    return Check("files", True, f"{len(data['files'])} files match their digests")


def _public(version: str) -> str:
    return version.split("+", 1)[0]  # "2.13.0+cpu" is the 2.13.0 release, CPU build


def _check_pins(data: dict, pins: dict[str, str], policy: Policy) -> Check:
    want = {**pins, **policy.tools}
    drift = []
    for tool, version in sorted(want.items()):
        got = data["tools"].get(tool)
        if got is None:
            if tool in policy.tools:
                drift.append({"tool": tool, "manifest": None, "required": version})
            continue  # a tool this build did not use (nncf for a QNN bundle)
        if _public(got) != _public(version):
            drift.append({"tool": tool, "manifest": got, "required": version})
    if drift:
        return Check("pins", False, "tool versions differ from the declared pins: "
                     + ", ".join(f"{d['tool']} {d['manifest']} (pinned {d['required']})" for d in drift),
                     "rebuild with the pinned environment (pip install -e '.[...]' from this checkout), or audit with the edge-export that built it",
                     tuple(drift))
    used = sorted(t for t in want if data["tools"].get(t))
    return Check("pins", True, f"{len(used)} tool versions equal the declared pins")


def _backend(data: dict):
    from exporter import backends

    return backends.find(data["bundle"]["format"])


def _check_plan(data: dict) -> Check:
    b, plan, q = data["bundle"], data["plan"], data["quantization"]
    found = []
    if plan.get("rejection") or not plan.get("admitted", False):
        found.append("the plan did not admit this build")
    for what, got in (("plan.precision", plan.get("precision")), ("quantization.precision", q.get("precision"))):
        if got != b["precision"]:
            found.append(f"{what} is {got!r}, the bundle says {b['precision']!r}")
    if plan.get("format") != b["format"]:
        found.append(f"plan.format is {plan.get('format')!r}, the bundle says {b['format']!r}")
    if b["precision"] not in data["target"].get("precisions", []):
        found.append(f"precision {b['precision']} is not one target {b['target']} runs")
    planned = {a["graph_name"]: a for a in plan.get("artifacts", [])}
    graphs = {c["graph_name"] for c in data["components"]}
    if set(planned) != graphs:
        found.append(f"graphs differ from the plan (unplanned: {sorted(graphs - set(planned)) or 'none'}; "
                     f"planned but absent: {sorted(set(planned) - graphs) or 'none'})")
    for a in planned.values():
        if a.get("precision") != b["precision"] or a.get("format") != b["format"]:
            found.append(f"planned graph {a['graph_name']} is {a.get('precision')}/{a.get('format')}, the bundle is {b['precision']}/{b['format']}")
    backend = _backend(data)
    if backend is None:
        found.append(f"format {b['format']!r} is not one this edge-export knows")
    for c in data["components"] if backend else ():
        found += backend.component_findings(c)
    if found:
        return Check("plan", False, "; ".join(found), "rebuild from the plan (edge-export recipe ...); a bundle must be what its plan says", tuple(found))
    return Check("plan", True, f"{b['precision']} / {b['format']}, {len(graphs)} graphs as planned")


def _emulation(data: dict) -> dict | None:
    v = data.get("verification") or {}
    return v if v.get("emulated") and v.get("emulates") == data["target"]["execution_provider"] else None


def _check_placement(data: dict, policy: Policy) -> Check:
    emu = _emulation(data)
    ep = emu["provider"] if emu else data["target"]["execution_provider"]
    backend = _backend(data)
    found = [] if backend else [f"format {data['bundle']['format']!r} is not one this edge-export knows"]
    for c in data["components"] if backend else ():
        found += backend.placement_findings(c, ep)
    if found:
        return Check("placement", False, "; ".join(found),
                     f"the artifact does not run fully on {ep}: fix the unsupported ops in the step module and rebuild", tuple(found))
    if emu:
        need = policy.require_placement
        return Check("placement", not need, f"placement unqualified: {emu['note']} (every node ran on {ep} in the emulation)"
                     + (" (the policy requires placement on the target's EP)" if need else ""),
                     f"run the bundle through the gate on a {data['target']['name']} host with {emu['emulates']} and record its placement" if need else "",
                     ({"emulated_by": ep, "target_provider": emu["emulates"], "placement": "unqualified"},))
    return Check("placement", True, backend.placement_summary(ep))


def _required_thresholds(recipe_name: str, precision: str, policy: Policy) -> dict | None:
    from recipes import get_recipe
    from verify.thresholds import tightened

    recipe = get_recipe(recipe_name)
    base = recipe.thresholds.get(precision)
    if base is None:
        return None
    th = tightened(base.to_json(), policy.thresholds.get("*"))
    return tightened(th, policy.thresholds.get(precision))


def _final_provider(data: dict) -> str:
    emu = _emulation(data)
    backend = _backend(data)
    fallback = emu["provider"] if emu else data["target"]["execution_provider"]
    return backend.final_provider(data, emu["provider"] if emu else None) if backend else fallback


def _check_parity(data: dict, full: dict | None, unreadable: EdgeExportError | None, policy: Policy) -> Check:
    from verify.thresholds import looser_than, stage_failures

    p, b = data["parity"], data["bundle"]
    if full is None:
        return Check("parity", False, unreadable.message, unreadable.hint)
    found = []
    if p["verdict"] != "pass":
        found.append(f"verdict {p['verdict']!r}")
    if policy.require_published and not b["published"]:
        found.append("not published")
    stages = full["stages"]
    if full.get("verdict") != p["verdict"] or [s["stage"] for s in stages] != [s["stage"] for s in p["stages"]]:
        found.append(f"the manifest's parity summary disagrees with {p.get('report')}")
    if not stages:
        found.append("no parity stages recorded")
    elif stages[-1]["provider"] != _final_provider(data):
        found.append(f"the last stage ran on {stages[-1]['provider']}, not the target's {_final_provider(data)}")
    for s in stages:
        if p.get("thresholds", {}).get(s["stage"]) != s["thresholds"]:
            found.append(f"stage {s['stage']}: the manifest's thresholds differ from those the stage was judged with")
        try:
            need = _required_thresholds(b["recipe"], s["precision"], policy)
        except EdgeExportError as e:
            found.append(f"recipe {b['recipe']!r} is unknown here ({e.message}); its thresholds cannot be checked")
            break
        if need is None:
            found.append(f"stage {s['stage']}: recipe {b['recipe']} has no thresholds for {s['precision']}")
            continue
        for th in (s["thresholds"], p.get("thresholds", {}).get(s["stage"], {})):
            for lo in looser_than(th, need):
                found.append(f"stage {s['stage']}: {lo['metric']} threshold {lo['recorded']} is looser than the required {lo['required']}")
        for f in stage_failures(s, need):
            found.append(f"stage {s['stage']}: {f['component']}/{f['output']} {f['metric']} = {f['value']:.6g} misses {f['threshold']}")
    found = list(dict.fromkeys(found))
    if found:
        return Check("parity", False, "; ".join(found[:8]) + (f"; and {len(found) - 8} more" if len(found) > 8 else ""),
                     "rebuild and verify with the recipe's thresholds; a bundle is trusted only on its own measured figures", tuple(found))
    return Check("parity", True, f"pass; {len(stages)} stages meet the recipe's thresholds" + (" tightened by the policy" if policy.thresholds else ""))


def _check_checkpoint(data: dict, policy: Policy) -> Check:
    ck = data["checkpoint"]
    found = []
    pin_file = ck.get("pin_file")
    if policy.require_pinned_checkpoint and not ck.get("pinned"):
        found.append(f"checkpoint {ck.get('source')} did not match its pin (built with --allow-unpinned)")
    if ck.get("pinned") and pin_file and policy.trusted_pins and pin_file.get("sha256") not in policy.trusted_pins:
        found.append(f"pinned by {pin_file.get('file')} (sha256 {str(pin_file.get('sha256'))[:16]}…), which is not among the policy's trusted pins")
    if not policy.allow_synthetic_checkpoint and ck.get("synthetic"):
        found.append(f"checkpoint {ck.get('source')} is synthetic (seeded weights), not a released model")
    if found:
        return Check("checkpoint", False, "; ".join(found),
                     "pin the checkpoint after review (`edge-export pin RECIPE --checkpoint DIR`), build with --pin, and list the pin file "
                     "in the policy's trusted_pins", tuple(found))
    how = f"by pin file {pin_file['file']} (sha256 {pin_file['sha256'][:16]}…)" if pin_file else "by the recipe's own pin"
    return Check("checkpoint", True, f"pinned {how}: {ck.get('source')} at {ck.get('revision')}" + (", synthetic" if ck.get("synthetic") else ""))


def _check_device_validation(bundle: Path, public_key: Path | None, policy: Policy, data: dict | None = None) -> Check:
    from exporter.hub.records import load_record, record_path, validation_state

    groups = ((data or {}).get("weight_sharing") or {}).get("groups") or []
    shared = (f"; its {len(groups)} weight-shared context binaries load on a device only (parity measured on per-graph contexts)"
              if groups else "")
    need = policy.require_device_validation
    fix = f"run `edge-export hub validate {bundle}` with an AI Hub token"
    try:
        rec = load_record(bundle, public_key)
    except EdgeExportError as e:
        return Check("device-validation", False, e.message, e.hint)
    state = validation_state(rec)
    if state == "none":
        return Check("device-validation", not need, "no device-validation record: simulator-only" + shared + (" (the policy requires a device run)" if need else ""),
                     fix if need else "")
    dev = rec["device"]
    where = f"{dev['name']} ({dev.get('hexagon') or '?'}, {dev.get('chipset')})"
    if state == "failed":
        f = rec.get("failure") or {}
        why = f"{f.get('stage')} job {f.get('job')}: {f.get('message')}" if f else "outputs missed the bundle's thresholds"
        return Check("device-validation", False, f"{'simulated ' if rec['simulated'] else ''}validation on {where} failed: {why} ({record_path(bundle).name})",
                     "the bundle is not qualified on that device; see the record")
    if state == "simulated":
        return Check("device-validation", not need, f"simulator-only: the record is a replay on the local HTP simulator for {where}, not a device run" + shared,
                     fix if need else "")
    return Check("device-validation", True, f"validated on {where} by {rec['source']}, {len(rec['components'])} graphs, {rec['created']}")


def _check_host_isa(data: dict, policy: Policy) -> Check:
    """Whether the verdict could depend on the CPU that measured it (exporter/hostcpu.py)."""
    from exporter.hostcpu import above_baseline, missing_from_baseline

    base = data["target"].get("isa_baseline")
    if not base:
        return Check("host-isa", True, f"{data['target']['name']} declares no CPU ISA baseline (its own accelerator's numerics)")
    host = (data.get("verification") or {}).get("host_cpu")
    isa = (data.get("quantization") or {}).get("isa") or {}
    strict = policy.require_baseline_host
    fix = (f"rebuild on a {base} host without the extra features, or with a scheme whose kernels are ISA-independent "
           "(docs/NOTES.md, 'int8 on every host')")
    if not host or host.get("features") is None:
        why = "the manifest does not record the CPU that measured parity" if not host else f"the CPU features of the measuring host are unknown ({host.get('source')})"
        return Check("host-isa", not strict, f"finding: {why}; target {data['target']['name']} promises {base}", fix, finding=True)
    extra, lacking = above_baseline(host, base), missing_from_baseline(host, base)
    where = f"{host.get('model') or host.get('arch')} ({host.get('arch')})"
    if extra == [] and not lacking:
        return Check("host-isa", True, f"parity measured on {where} at the target's baseline {base}")
    what = (f"with {', '.join(extra)} beyond {base}" if extra else f"a {host.get('arch')} host for a {base} target" if extra is None
            else f"lacking {', '.join(lacking)} of {base}")
    if isa.get("dependent") is False:
        return Check("host-isa", True, f"parity measured on {where}, {what}; the scheme's kernels are ISA-independent: {isa.get('why')}")
    return Check("host-isa", not strict, f"finding: parity measured on {where}, {what}, and {data['quantization'].get('scheme')} is not "
                 f"proven ISA-independent: the verdict may differ on a {base} host", fix, ({"host": host, "baseline": base},), finding=True)


def audit_bundle(bundle: Path, public_key: Path | None, policy: Policy, pins: dict[str, str] | None = None) -> BundleAudit:
    bundle = Path(bundle)
    if not (bundle / mf.MANIFEST).is_file():
        return BundleAudit(bundle, (Check("manifest", False, f"{bundle / mf.MANIFEST} is missing", "point at a bundle directory"),))
    # the signature first: nothing in a bundle whose signature fails is parsed, let alone believed
    sig, signed = _verify_signature(bundle, public_key)
    if not sig.ok:
        return BundleAudit(bundle, (sig, Check("manifest", False, "not read: the signature does not verify, so nothing in the bundle is trusted",
                                                "fix the signature check first")))
    try:
        data = mf.load(bundle)
    except EdgeExportError as e:
        return BundleAudit(bundle, (sig, Check("manifest", False, e.message, e.hint)))
    cell = {k: data["bundle"][k] for k in ("recipe", "target", "precision", "format")}
    full, unreadable = None, None
    try:
        full = mf.load_parity(bundle, data)
    except EdgeExportError as e:
        unreadable = e
    checks = [
        Check("manifest", True, f"schema {data['schema_version']}, self-consistent, paths inside the bundle"),
        _check_signer(data, Path(public_key), policy),
        _check_files(bundle, data, signed),
        _check_references(bundle, data),
        _check_pins(data, declared_pins() if pins is None else pins, policy),
        _check_plan(data),
        _check_placement(data, policy),
        _check_parity(data, full, unreadable, policy),
        _check_checkpoint(data, policy),
        _check_device_validation(bundle, public_key, policy, data),
        _check_host_isa(data, policy),
    ]
    return BundleAudit(bundle, tuple(checks), cell, data, full["stages"] if full else None)


def audit_paths(paths, public_key: Path | None, policy: Policy) -> list[BundleAudit]:
    bundles = find_bundles(paths)
    if not bundles:
        raise UsageError(f"no bundles (directories holding {mf.MANIFEST}) under {', '.join(map(str, paths))}",
                         "build one with `edge-export recipe ...` or point at its directory")
    pins = declared_pins()
    return [audit_bundle(b, public_key, policy, pins) for b in bundles]
