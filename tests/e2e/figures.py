"""Tables and plots for the comparison reports and the figures a test writes under
target/e2e/: a Markdown table, and a line plot as a standalone SVG (no plotting library on
these machines).

Python 3 standard library only.
"""

from __future__ import annotations

from pathlib import Path


def markdown_table(headers, rows) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in cells[1:]])


def svg_lines(path: Path, title: str, series: dict, xlabel: str, ylabel: str, marks=()) -> Path:
    """A line plot as a standalone SVG: `series` maps a label to [(x, y), …]; `marks` are
    (x, label) vertical lines. No plotting library on these machines, so by hand."""
    w, h, left, right, top, bottom = 720, 400, 60, 150, 40, 50
    xs = [x for pts in series.values() for x, _ in pts] or [0.0, 1.0]
    ys = [y for pts in series.values() for _, y in pts] or [0.0, 1.0]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1e-9)
    y1 = max(ys) * 1.1 or 1.0
    sx = lambda x: left + (x - x0) / (x1 - x0) * (w - left - right)  # noqa: E731
    sy = lambda y: h - bottom - y / y1 * (h - top - bottom)  # noqa: E731
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">{xlabel}</text>',
           f'<text x="15" y="{(top + h - bottom) / 2}" text-anchor="middle" transform="rotate(-90 15 {(top + h - bottom) / 2})">{ylabel}</text>']
    for i in range(6):
        y = y1 * i / 5
        out.append(f'<text x="{left - 5}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
        out.append(f'<line x1="{left}" y1="{sy(y):.1f}" x2="{w - right}" y2="{sy(y):.1f}" stroke="#ddd"/>')
    for i in range(6):
        x = x0 + (x1 - x0) * i / 5
        out.append(f'<text x="{sx(x):.1f}" y="{h - bottom + 16}" text-anchor="middle">{x:.0f}</text>')
    for x, label in marks:
        out.append(f'<line x1="{sx(x):.1f}" y1="{top}" x2="{sx(x):.1f}" y2="{h - bottom}" stroke="#999" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{sx(x) + 3:.1f}" y="{top + 12}">{label}</text>')
    for i, (label, pts) in enumerate(series.items()):
        color = colors[i % len(colors)]
        if pts:
            d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{d}"/>')
        out.append(f'<line x1="{w - right + 10}" y1="{top + 20 * i + 10}" x2="{w - right + 30}" y2="{top + 20 * i + 10}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{w - right + 35}" y="{top + 20 * i + 14}">{label}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")
    return path
