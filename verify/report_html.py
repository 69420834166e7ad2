"""The HTML report: one self-contained page (inline CSS and SVG, no scripts, no external resources).

An index of every bundle (verdict, audit, failing checks) links to one section per bundle with its
checks, and per parity stage: worst figures per component against the thresholds (bars, the
threshold as a line), the per-call PSNR distribution per component (box plots), teacher-forced
token agreement over decode steps (a line per stage), and placement share per component.
"""

from __future__ import annotations

import math
from html import escape

from verify.report import OP_SYMBOL, agreement, bundle_name, decode_sentence, figure_text as _fmt
from verify.thresholds import INFORMATIONAL, has_decode, output_checks, output_metrics

GREEN, RED, GREY, BLUE = "#1a7f37", "#cf222e", "#8c959f", "#0969da"
STAGE_COLOURS = ("#0969da", "#8250df", "#bf8700", "#1a7f37", "#cf222e")
PROVIDER_COLOURS = {"QNNExecutionProvider": "#8250df", "CPUExecutionProvider": "#0969da", "XnnpackBackend": "#1a7f37", "portable": "#bf8700"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1f2328;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:32px}h3{font-size:15px;margin-top:20px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}.dim{color:#656d76}
code{background:#f6f8fa;padding:1px 4px;border-radius:4px}.charts{display:flex;flex-wrap:wrap;gap:16px}
svg{background:#fff;border:1px solid #d0d7de;border-radius:6px}details{margin:6px 0}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px}
"""


def _badge(ok: bool, yes: str = "pass", no: str = "FAIL") -> str:
    return f'<span class="badge" style="background:{GREEN if ok else RED}">{yes if ok else no}</span>'


def _anchor(i: int) -> str:
    return f"b{i}"


def _nines(cos: float) -> float:
    """Cosine similarity as 'nines' (0.999 -> 3), capped at 12: readable on one axis."""
    return min(12.0, -math.log10(max(1.0 - cos, 1e-12)))


def _short(v: float) -> str:
    return f"{v:.4g}"


def _close_with_threshold(out: list[str], tx: float, top: int, h: int, label: str) -> str:
    """The threshold as a dashed vertical line with its label under the plot, then the end of the SVG."""
    out.append(f'<line x1="{tx:.1f}" y1="{top - 4}" x2="{tx:.1f}" y2="{h - 22}" stroke="{RED}" stroke-dasharray="4 3"/>')
    out.append(f'<text x="{tx:.1f}" y="{h - 8}" font-size="10" text-anchor="middle" fill="{RED}">{escape(label.strip())}</text>')
    out.append("</svg>")
    return "".join(out)


def _bar_chart(title: str, rows: list[tuple[str, float | None, str]], threshold: float, higher_better: bool, unit: str,
               vmax: float | None = None, width: int = 520) -> str:
    """Horizontal bars, one per row (label, value, tooltip), the threshold as a dashed line."""
    label_w, row_h, top = 170, 18, 30
    vals = [v for _, v, _ in rows if v is not None]
    vmax = vmax or max(vals + [threshold]) * 1.05 or 1.0
    plot_w = width - label_w - 70  # room for the value label after the longest bar
    x = lambda v: label_w + plot_w * max(0.0, min(v, vmax)) / vmax
    h = top + row_h * len(rows) + 26
    out = [f'<svg width="{width}" height="{h}" role="img" aria-label="{escape(title)}">',
           f'<text x="8" y="18" font-size="13" font-weight="600">{escape(title)}</text>']
    for i, (label, v, tip) in enumerate(rows):
        y = top + i * row_h
        shown = vmax if v is None else v
        ok = True if v is None and higher_better else (v >= threshold if higher_better else v <= threshold)
        out.append(f'<text x="{label_w - 6}" y="{y + 12}" font-size="11" text-anchor="end">{escape(label[:28])}</text>')
        out.append(f'<rect x="{label_w}" y="{y + 2}" width="{max(1.0, x(shown) - label_w):.1f}" height="{row_h - 5}" fill="{GREEN if ok else RED}">'
                   f'<title>{escape(tip)}</title></rect>')
        out.append(f'<text x="{x(shown) + 4:.1f}" y="{y + 12}" font-size="10" fill="#1f2328">{escape("inf" if v is None else _short(v))}</text>')
    return _close_with_threshold(out, x(threshold), top, h, f"threshold {_short(threshold)} {unit}")


def _box_chart(title: str, rows: list[tuple[str, list | None]], quantiles: list | None, threshold: float, width: int = 520) -> str:
    """Box plots of per-call PSNR (p05..p95 whiskers, p25..p75 box, median, min dot); None quantiles are inf."""
    label_w, row_h, top = 170, 20, 30
    finite = [v for _, q in rows if q for v in q if v is not None]
    vmax = max(finite + [threshold]) * 1.05 if finite else threshold * 2
    plot_w = width - label_w - 30
    x = lambda v: label_w + plot_w * (min(v, vmax) if v is not None else vmax) / vmax
    h = top + row_h * len(rows) + 26
    out = [f'<svg width="{width}" height="{h}" role="img" aria-label="{escape(title)}">',
           f'<text x="8" y="18" font-size="13" font-weight="600">{escape(title)}</text>']
    for i, (label, q) in enumerate(rows):
        y = top + i * row_h + row_h / 2
        out.append(f'<text x="{label_w - 6}" y="{y + 4}" font-size="11" text-anchor="end">{escape(label[:28])}</text>')
        if not q or not quantiles:
            out.append(f'<text x="{label_w + 4}" y="{y + 4}" font-size="10" fill="{GREY}">no per-call distribution recorded</text>')
            continue
        qs = dict(zip(quantiles, q))
        lo, p05, p25, p50, p75, p95 = (qs.get(k) for k in (0.0, 0.05, 0.25, 0.5, 0.75, 0.95))
        tip = ", ".join(f"p{int(k * 100):02d} {_fmt(v)}" for k, v in zip(quantiles, q)) + " dB"
        colour = GREEN if (lo is None or lo >= threshold) else RED
        out.append(f'<line x1="{x(p05):.1f}" y1="{y}" x2="{x(p95):.1f}" y2="{y}" stroke="{colour}"/>')
        out.append(f'<rect x="{x(p25):.1f}" y="{y - 6}" width="{max(1.0, x(p75) - x(p25)):.1f}" height="12" fill="{colour}" fill-opacity="0.35" stroke="{colour}"><title>{escape(tip)}</title></rect>')
        out.append(f'<line x1="{x(p50):.1f}" y1="{y - 6}" x2="{x(p50):.1f}" y2="{y + 6}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<circle cx="{x(lo):.1f}" cy="{y}" r="3" fill="{colour}"><title>min {_fmt(lo)} dB</title></circle>')
    return _close_with_threshold(out, x(threshold), top, h, f"threshold {_short(threshold)} dB")


def _agreement_chart(stages: list[dict], width: int = 520, height: int = 220) -> str:
    left, right, top, bottom = 44, 12, 30, 34
    series = [(s["stage"], s["decode"].get("agreement_by_step") or [], s["thresholds"]["min_token_agreement"]) for s in stages]
    n = max((len(v) for _, v, _ in series), default=0)
    out = [f'<svg width="{width}" height="{height}" role="img" aria-label="token agreement over decode steps">',
           '<text x="8" y="18" font-size="13" font-weight="600">Teacher-forced token agreement by decode step</text>']
    if n == 0:
        out.append(f'<text x="{left}" y="{top + 30}" font-size="11" fill="{GREY}">no per-step agreement recorded (bundle predates it)</text></svg>')
        return "".join(out)
    pw, ph = width - left - right, height - top - bottom
    x = lambda i: left + pw * (i / max(n - 1, 1))
    y = lambda v: top + ph * (1.0 - v)
    for v in (0.0, 0.5, 1.0):
        out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + pw}" y2="{y(v):.1f}" stroke="#eaeef2"/>'
                   f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end">{v:g}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" font-size="10" text-anchor="middle">decode step (1 … {n})</text>')
    for k, (name, vals, th) in enumerate(series):
        colour = STAGE_COLOURS[k % len(STAGE_COLOURS)]
        if vals:
            pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vals))
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"><title>{escape(name)}</title></polyline>')
        out.append(f'<line x1="{left}" y1="{y(th):.1f}" x2="{left + pw}" y2="{y(th):.1f}" stroke="{colour}" stroke-dasharray="4 3" stroke-opacity="0.6"/>')
        out.append(f'<rect x="{left + 8 + 150 * k}" y="{top + 4}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{left + 22 + 150 * k}" y="{top + 13}" font-size="10">{escape(name)} (≥ {th:g} dashed)</text>')
    out.append("</svg>")
    return "".join(out)


def _placement_chart(placement: list[dict], width: int = 520) -> str:
    label_w, row_h, top = 170, 18, 30
    providers = sorted({p for r in placement for p in r["share"]})
    h = top + row_h * len(placement) + 30
    pw = width - label_w - 20
    out = [f'<svg width="{width}" height="{h}" role="img" aria-label="placement share">',
           '<text x="8" y="18" font-size="13" font-weight="600">Placement share per component</text>']
    for i, r in enumerate(placement):
        y, x0 = top + i * row_h, label_w
        out.append(f'<text x="{label_w - 6}" y="{y + 12}" font-size="11" text-anchor="end">{escape(r["component"][:28])}</text>')
        for p in providers:
            w = pw * r["share"].get(p, 0.0)
            if w > 0:
                out.append(f'<rect x="{x0:.1f}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}" fill="{PROVIDER_COLOURS.get(p, GREY)}">'
                           f'<title>{escape(p)}: {r["by_provider"].get(p)} nodes ({r["share"][p]:.0%})</title></rect>')
                x0 += w
    for k, p in enumerate(providers):
        out.append(f'<rect x="{label_w + 170 * k}" y="{h - 18}" width="10" height="10" fill="{PROVIDER_COLOURS.get(p, GREY)}"/>'
                   f'<text x="{label_w + 14 + 170 * k}" y="{h - 9}" font-size="10">{escape(p)}</text>')
    out.append("</svg>")
    return "".join(out)


def _stage_section(st: dict) -> str:
    th, d = st["thresholds"], st["decode"]
    comps = st["components"]
    ran = [r for r in comps if r.get("calls")]
    measured = [r for r in ran if r["min_cosine"] is not None and r["max_abs"] is not None]  # the rest: NaN/Inf only, flagged below
    nonfinite = [r["component"] for r in ran if r.get("nonfinite_calls")]
    parts = [f'<h3>Stage <code>{escape(st["stage"])}</code> on {escape(st["provider"])} ({escape(st["precision"])}) {_badge(st["verdict"] == "pass")}</h3>',
             f'<p>{escape(decode_sentence(st))}</p>',
             '<div class="charts">',
             _bar_chart("Worst cosine per component, in nines (0.999 = 3)",
                        [(r["component"], _nines(r["min_cosine"]), f"{r['cosine_output']}: {r['min_cosine']:.8f}") for r in measured],
                        _nines(th["min_cosine"]), True, "nines", vmax=max([_nines(r["min_cosine"]) for r in measured] + [_nines(th["min_cosine"])]) * 1.1),
             _bar_chart("Worst PSNR per component (dB)",
                        [(r["component"], r["min_psnr_db"], f"{r['psnr_output']}: {_fmt(r['min_psnr_db'])} dB") for r in measured],
                        th["min_psnr_db"], True, "dB"),
             _box_chart("Per-call PSNR of the worst output (dB)", [(r["component"], r.get("psnr_distribution")) for r in measured],
                        next((r.get("quantiles") for r in measured if r.get("quantiles")), None), th["min_psnr_db"]),
             _bar_chart("Max abs error per component", [(r["component"], r["max_abs"], f"{r['max_abs']:.4g}") for r in measured],
                        th["max_abs"], False, ""),
             "</div>"]
    if nonfinite:
        parts.append(f'<p class="fail">NaN or Inf in the artifact\'s outputs (a parity failure): {escape(", ".join(nonfinite))}</p>')
    never = [r["component"] for r in comps if not r.get("calls")]
    if never:
        parts.append(f'<p class="fail">never ran (not verified): {escape(", ".join(never))}</p>')
    cols = [(x.figure, f"{x.title} {OP_SYMBOL[x.op]} {th[x.name]}") for x in output_metrics(th)]
    cols += [(f, f.replace("_", " ")) for f, (scope, _) in INFORMATIONAL.items() if scope == "output"]
    rows = []
    for comp, outs in sorted(st["outputs"].items()):
        for out, m in sorted(outs.items()):
            ok = m["calls"] and all(c["ok"] for c in output_checks(m, th))
            rows.append(f'<tr><td>{escape(comp)}</td><td>{escape(out)}</td><td>{m["calls"]}</td>'
                        + "".join(f"<td>{_fmt(m.get(f))}</td>" for f, _ in cols)
                        + f'<td class="{"pass" if ok else "fail"}">{"pass" if ok else "FAIL"}</td></tr>')
    parts.append(f'<details><summary>Every output ({len(rows)})</summary><table><tr><th>component</th><th>output</th><th>calls</th>'
                 + "".join(f"<th>{escape(t)}</th>" for _, t in cols) + "<th></th></tr>"
                 + "".join(rows) + "</table></details>")
    pp = d.get("per_prompt") or []
    if pp:
        parts.append("<details><summary>Per prompt</summary><table><tr><th>prompt tokens</th><th>steps</th><th>agreement</th><th>greedy prefix</th>"
                     "<th>exact</th><th>buckets</th></tr>" + "".join(
                         f'<tr><td>{p["prompt_tokens"]}</td><td>{p["steps"]}</td><td>{_fmt(p["teacher_forced_agreement"])}</td><td>{p["greedy_prefix"]}</td>'
                         f'<td>{p["greedy_exact"]}</td><td>{escape(", ".join(map(str, p.get("contexts", []))))}</td></tr>' for p in pp) + "</table></details>")
    return "".join(parts)


def _bundle_section(i: int, b: dict) -> str:
    parts = [f'<h2 id="{_anchor(i)}">{escape(bundle_name(b))} {_badge(b["audit_ok"], "audit pass", "audit FAIL")}</h2>',
             f'<p class="dim">{escape(b["bundle"])}' + (f' · built {escape(b["created"])}' if b.get("created") else "")
             + (f' · {escape(b["verification"].get("note", ""))}' if b.get("verification") else "") + "</p>",
             "<table><tr><th>check</th><th>result</th><th>detail</th></tr>"]
    for c in b["checks"]:
        fix = f'<br><span class="dim">fix: {escape(c["fix"])}</span>' if not c["ok"] and c["fix"] else ""
        parts.append(f'<tr><td>{escape(c["id"])}</td><td class="{"pass" if c["ok"] else "fail"}">{"pass" if c["ok"] else "FAIL"}</td>'
                     f'<td>{escape(c["message"])}{fix}</td></tr>')
    parts.append("</table>")
    if b["stages"]:
        decoded = [st for st in b["stages"] if has_decode(st)]
        parts.append('<div class="charts">' + (_agreement_chart(decoded) if decoded else "") + (_placement_chart(b["placement"]) if b["placement"] else "") + "</div>")
    parts += [_stage_section(st) for st in b["stages"]]
    return "".join(parts)


def render_html(rep: dict) -> str:
    s = rep["summary"]
    rows = []
    for i, b in enumerate(rep["bundles"]):
        last = b["stages"][-1] if b["stages"] else None
        worst = min((r["min_cosine"] if r["min_cosine"] is not None else -1.0 for r in last["components"] if r.get("calls")), default=None) if last else None
        fails = ", ".join(c["id"] for c in b["checks"] if not c["ok"]) or "—"
        rows.append(f'<tr><td><a href="#{_anchor(i)}">{escape(bundle_name(b))}</a></td><td>{escape(str(b["cell"].get("format", "")))}</td>'
                    f'<td>{_badge(b["verdict"] == "pass", "pass", escape(str(b["verdict"])))}</td><td>{_badge(b["audit_ok"])}</td>'
                    f'<td>{escape(fails)}</td><td>{escape(last["provider"]) if last else "—"}</td><td>{_fmt(worst) if worst is not None else "—"}</td>'
                    f'<td>{agreement(last)}</td></tr>')
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>edge-export report</title>"
            f"<style>{CSS}</style></head><body>"
            f'<h1>edge-export report: {s["bundles"]} bundle(s), {len(s["failing"])} failing</h1>'
            f'<p class="dim">policy {escape(rep["policy"]["name"])} ({escape(rep["policy"]["source"])})</p>'
            "<table><tr><th>bundle</th><th>format</th><th>verdict</th><th>audit</th><th>failing checks</th><th>final provider</th>"
            "<th>worst cosine</th><th>token agreement</th></tr>" + "".join(rows) + "</table>"
            + "".join(_bundle_section(i, b) for i, b in enumerate(rep["bundles"])) + "</body></html>\n")
