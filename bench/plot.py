"""The README's plot: per-stage wall time and peak memory against checkpoint size, from bench/scaling.py's JSON.

    python bench/plot.py OUT.svg SCALING.json [SCALING.json ...] [--label NAME ...]

Each JSON file (a list of rows, one per size) is one series set, drawn with its own dash pattern and named by its
--label (default: the file's stem); files given the same label are merged into one set (sizes run separately).
Left panel: wall seconds of each stage against the checkpoint's GiB. Right panel: (peak RSS - baseline) / weights
of each stage, with the 1.5 x bound as a line. Plain SVG written by hand (no
plotting library is a dependency of this project); the numbers it draws are the JSON's, nothing is smoothed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from xml.sax.saxutils import escape

STAGES = ("resolve", "load", "export", "quantize", "verify", "memory", "sign")
COLOURS = {"resolve": "#7f7f7f", "load": "#bcbd22", "export": "#1f77b4", "quantize": "#d62728", "verify": "#2ca02c",
           "memory": "#9467bd", "sign": "#ff7f0e"}
DASHES = ("", "6,3", "2,3", "8,3,2,3")
W, H, PAD = 420, 300, 52  # one panel


def _ticks(hi: float, n: int = 5) -> list[float]:
    """0 and multiples of the 1-2-5 step that gives at most n intervals up to hi."""
    import math

    k = 10 ** math.floor(math.log10(hi / n)) if hi > 0 else 1
    step = next(m * k for m in (1, 2, 5, 10) if hi / (m * k) <= n)
    return [round(i * step, 6) for i in range(int(hi / step) + 1)]


def _panel(x0: int, title: str, ylabel: str, series: list[tuple[str, str, list[tuple[float, float]]]], xmax: float,
           ymax: float, hline: float | None = None) -> list[str]:
    """series: (stage, dash, [(x, y)]) drawn as polylines with point markers."""
    sx = lambda x: x0 + PAD + (W - PAD - 12) * x / xmax  # noqa: E731
    sy = lambda y: H - PAD + 12 - (H - PAD - 20) * y / ymax  # noqa: E731
    el = [f'<text x="{x0 + W / 2}" y="16" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
          f'<line x1="{sx(0)}" y1="{sy(0)}" x2="{sx(xmax)}" y2="{sy(0)}" stroke="black"/>',
          f'<line x1="{sx(0)}" y1="{sy(0)}" x2="{sx(0)}" y2="{sy(ymax)}" stroke="black"/>',
          f'<text x="{x0 + W / 2}" y="{H + 4}" text-anchor="middle">checkpoint weights, GiB</text>',
          f'<text x="{x0 + 12}" y="{H / 2}" text-anchor="middle" transform="rotate(-90 {x0 + 12} {H / 2})">{escape(ylabel)}</text>']
    for t in _ticks(xmax):
        el.append(f'<text x="{sx(t)}" y="{sy(0) + 14}" text-anchor="middle">{t:g}</text>')
    for t in _ticks(ymax):
        el.append(f'<text x="{sx(0) - 4}" y="{sy(t) + 4}" text-anchor="end">{t:g}</text>')
        el.append(f'<line x1="{sx(0)}" y1="{sy(t)}" x2="{sx(xmax)}" y2="{sy(t)}" stroke="#eee"/>')
    if hline is not None:
        el.append(f'<line x1="{sx(0)}" y1="{sy(hline)}" x2="{sx(xmax)}" y2="{sy(hline)}" stroke="black" stroke-dasharray="3,3"/>')
        el.append(f'<text x="{sx(xmax) - 2}" y="{sy(hline) - 4}" text-anchor="end">{hline:g} × bound</text>')
    for stage, dash, pts in series:
        pts = sorted(pts)
        c = COLOURS.get(stage, "black")
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        el.append(f'<polyline points="{coords}" fill="none" stroke="{c}" stroke-width="2" stroke-dasharray="{dash}"/>')
        el += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"><title>{escape(stage)}: {y:g}</title></circle>' for x, y in pts]
    return el


def render(sets: list[tuple[str, list[dict]]]) -> str:
    gib = 1 << 30
    wall, mem = [], []
    for i, (_, rows) in enumerate(sets):
        dash = DASHES[i % len(DASHES)]
        for stage in STAGES:
            pw = [(r["weights_bytes"] / gib, r["stages"][stage]["wall_s"]) for r in rows if stage in r["stages"]]
            pm = [(r["weights_bytes"] / gib, r["stages"][stage]["peak_over_weights"]) for r in rows
                  if stage in r["stages"] and r["stages"][stage]["peak_over_weights"] is not None]
            if pw:
                wall.append((stage, dash, pw))
            if pm:
                mem.append((stage, dash, pm))
    xmax = max(x for _, _, p in wall for x, _ in p) * 1.08
    el = _panel(0, "wall time per stage", "seconds", wall, xmax, max(y for _, _, p in wall for _, y in p) * 1.1)
    el += _panel(W + 20, "peak RSS over the weights", "(peak − baseline) / weights", mem, xmax,
                 max(1.6, max(y for _, _, p in mem for _, y in p) * 1.1), hline=1.5)
    ly = H + 24
    for j, stage in enumerate(s for s in STAGES if any(m[0] == s for m in wall)):
        x = 10 + j * 118
        el.append(f'<line x1="{x}" y1="{ly}" x2="{x + 22}" y2="{ly}" stroke="{COLOURS[stage]}" stroke-width="3"/>')
        el.append(f'<text x="{x + 26}" y="{ly + 4}">{"memory probe" if stage == "memory" else stage}</text>')
    for i, (label, _) in enumerate(sets):
        y = ly + 20 + 16 * i
        el.append(f'<line x1="10" y1="{y}" x2="32" y2="{y}" stroke="black" stroke-width="2" stroke-dasharray="{DASHES[i % len(DASHES)]}"/>')
        el.append(f'<text x="36" y="{y + 4}">{escape(label)}</text>')
    height = ly + 20 + 16 * len(sets)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W + 20}" height="{height}" font-family="sans-serif" '
            f'font-size="11"><rect width="100%" height="100%" fill="white"/>' + "".join(el) + "</svg>\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("inputs", type=Path, nargs="+")
    ap.add_argument("--label", action="append", default=[])
    a = ap.parse_args()
    labels = a.label + [p.stem for p in a.inputs[len(a.label):]]
    sets: dict[str, list[dict]] = {}  # files given the same label are one series set (sizes run separately)
    for lab, path in zip(labels, a.inputs):
        sets.setdefault(lab, []).extend(json.loads(path.read_text()))
    a.out.write_text(render([(lab, sorted(rows, key=lambda r: r["weights_bytes"])) for lab, rows in sets.items()]))
    print(a.out)


if __name__ == "__main__":
    main()
