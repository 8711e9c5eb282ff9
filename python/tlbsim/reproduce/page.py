"""The figures and the HTML page of ``tlbsim reproduce``.

One figure per ``figure`` named by the claims (``[figure.<name>]`` of paper.toml): for each
claim of that figure, the paper's value and ours side by side, a red cross over the
claims that disagree. The page lists every claim beside ours with its tolerance and
verdict (coloured), then the figures, embedded as base64 PNG like ``tlbsim report``'s page
(and written beside it as ``<figure>.png``). Figures follow report.py's conventions:
matplotlib's object API on Agg, default style, no dates in the metadata, so the output is
deterministic. Simplified: no error bars (a claim is one number on each side) and no
PDF; a figure's claims share one y axis and unit.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tlbsim.reproduce.paper import AGREE, DISAGREE, Paper

DPI = 120
ROW_COLOURS = {AGREE: "#e3f4e1", DISAGREE: "#fbe0de"}


def fmt(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:.3f}"


def figures(paper: Paper, rows: Sequence[Mapping[str, Any]], out: Path) -> list[Path]:
    """One PNG per figure of the claims, into ``out``; returns their paths."""
    import matplotlib
    from matplotlib.figure import Figure

    by_id = {r["id"]: r for r in rows}
    written = []
    with matplotlib.rc_context(matplotlib.rcParamsDefault):
        matplotlib.rcParams.update({"font.size": 9})
        for name, fdef in paper.figures.items():
            claims = [c for c in paper.claims if c.figure == name]
            if not claims:
                continue
            fig = Figure(figsize=(max(6.0, 0.55 * len(claims) + 2), 4.4), dpi=DPI, layout="constrained")
            ax = fig.add_subplot()
            xs = list(range(len(claims)))
            paper_v = [_num(by_id[c.id]["paper_value"]) for c in claims]
            ours_v = [_num(by_id[c.id]["ours"]) for c in claims]
            ax.bar(
                [x - 0.2 for x in xs],
                paper_v,
                0.4,
                label=paper.paper_label,
                color="white",
                edgecolor="black",
                hatch="//",
            )
            ax.bar([x + 0.2 for x in xs], ours_v, 0.4, label="ours (tlbsim)", color="#1f77b4")
            tops = [v for v in paper_v + ours_v if not math.isnan(v)]
            top = max(tops) if tops else 1.0
            for x, c in zip(xs, claims):
                if by_id[c.id]["verdict"] == DISAGREE:
                    ax.annotate(
                        "x",
                        (x, top * 1.02 if not fdef.log else top),
                        ha="center",
                        va="bottom",
                        color="#d62728",
                        fontsize=12,
                        fontweight="bold",
                    )
            if fdef.log:
                ax.set_yscale("log")
            elif top > 0:
                ax.set_ylim(0, top * 1.15)
            ax.set_xticks(xs, [c.label for c in claims], rotation=55, ha="right")
            ax.set_ylabel(fdef.ylabel)
            ax.set_title(fdef.title)
            ax.legend(fontsize="small")
            path = out / f"{name}.png"
            fig.savefig(path, dpi=DPI, metadata={"Software": None})
            written.append(path)
    return written


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


_CSS = """
body { font-family: sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; vertical-align: top; }
td.num { text-align: right; font-family: monospace; }
td.id { font-family: monospace; white-space: nowrap; }
.note, figcaption { color: #555; font-size: 0.9em; }
.warning { color: #a40000; }
img { max-width: 100%; }
"""


def write_html(
    paper: Paper,
    rows: Sequence[Mapping[str, Any]],
    meta: Mapping[str, Any],
    figure_paths: Sequence[Path],
    out: Path,
    extra: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """``out/index.html``: the claims beside ours, then the figures, then the ``extra``
    figures a paper's ``outputs`` hook returned (``path``, ``title``, ``caption``)."""
    e = html.escape
    title = f"tlbsim reproduce {paper.name}: {paper.title}"
    c = meta["counts"]
    parts = _head(title)
    if paper.citation:
        parts.append(f"<p>{e(paper.citation)}</p>")
    if paper.description:
        parts.append(f"<p>{e(paper.description)}</p>")
    parts.append(f"<p><b>Paper values:</b> {e(meta['reference_source'])}</p>")
    sweeps = "; ".join(
        f"{n}: {s['total']} runs ({s['ran']} run now, {s['skipped']} finished before)"
        for n, s in meta["sweeps"].items()
    )
    if meta["mode"] == "quick":
        mode = f"quick (reduced sweeps: fewer seeds and operations; the full run takes {meta['full_run']})"
    else:
        mode = "full"
    parts.append(
        f'<p class="note">Mode: {e(mode)}. Sweeps: {e(sweeps)}. '
        f"{c['agree']} agree, {c['disagree']} disagree, {c['n/a']} n/a.</p>"
    )
    for w in meta.get("warnings", []):
        parts.append(f'<p class="warning">Warning: {e(w)}</p>')
    parts += [
        "<h2>Claims</h2>",
        "<table>",
        (
            f"<tr><th>id</th><th>section</th><th>claim</th><th>{e(paper.paper_label)}</th><th>ours</th><th>unit</th>"
            "<th>tolerance</th><th>verdict</th><th>note</th></tr>"
        ),
    ]
    for r in rows:
        colour = ROW_COLOURS.get(r["verdict"], "#eeeeee")
        parts.append(
            f'<tr style="background:{colour}"><td class="id">{e(r["id"])}</td><td>{e(r["section"])}</td>'
            f'<td>{e(r["claim"])}</td><td class="num">{e(fmt(r["paper_value"]))}</td>'
            f'<td class="num">{e(fmt(r["ours"]))}</td><td>{e(r["unit"])}</td><td>{e(r["tolerance"])}</td>'
            f"<td><b>{e(r['verdict'])}</b></td><td>{e(r['note'])}</td></tr>"
        )
    parts.append("</table>")
    for path in figure_paths:
        fdef = paper.figures[path.stem]
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        caption = f"{fdef.caption} " if fdef.caption else ""
        parts += [
            f'<h2 id="{e(path.stem)}">{e(fdef.title)}</h2>',
            "<figure>",
            f'<img alt="{e(fdef.title)}" src="data:image/png;base64,{data}">',
            (
                f"<figcaption>{e(caption)}Hatched: {e(paper.paper_label)}; blue: ours; a red x: outside the tolerance. "
                f"(<code>{e(path.name)}</code>)</figcaption>"
            ),
            "</figure>",
        ]
    for fig in extra:
        path = Path(fig["path"])
        if not path.is_file():
            continue
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts += [
            f'<h2 id="{e(path.stem)}">{e(str(fig.get("title", path.stem)))}</h2>',
            "<figure>",
            f'<img alt="{e(str(fig.get("title", path.stem)))}" src="data:image/png;base64,{data}">',
            f"<figcaption>{e(str(fig.get('caption', '')))} (<code>{e(path.name)}</code>)</figcaption>",
            "</figure>",
        ]
    parts += [
        (
            '<p class="note">The claims are also in <code>claims.json</code>; the runs in '
            "<code>sweeps/</code> (<code>tlbsim collect</code> and <code>tlbsim report</code> read them).</p>"
        ),
        "</body></html>",
        "",
    ]
    index = out / "index.html"
    tmp = out / ".index.html.tmp"
    tmp.write_text("\n".join(parts), encoding="utf-8")
    tmp.replace(index)
    return index


def _head(title: str) -> list[str]:
    """The opening of a page titled ``title``: document head, style and heading."""
    e = html.escape
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]


def write_index(meta: Mapping[str, Any], out: Path) -> Path:
    """``out/index.html`` of ``tlbsim reproduce all``: per paper its counts and a link."""
    e = html.escape
    title = f"tlbsim reproduce all ({meta['mode']})"
    parts = [
        *_head(title),
        f'<p class="note">Mode: {e(meta["mode"])}.</p>',
        "<table>",
        "<tr><th>paper</th><th>title</th><th>agree</th><th>disagree</th><th>n/a</th><th>full run</th><th>notes</th></tr>",
    ]
    for p in meta["papers"]:
        c = p.get("counts") or {}
        if p.get("error"):
            notes = f'<span class="warning">failed: {e(p["error"])}</span>'
        else:
            notes = "".join(f'<span class="warning">Warning: {e(w)}</span><br>' for w in p.get("warnings", []))
        parts.append(
            f'<tr><td class="id"><a href="{e(p["page"])}">{e(p["paper"])}</a></td><td>{e(p.get("title", ""))}</td>'
            f'<td class="num">{c.get("agree", "")}</td><td class="num">{c.get("disagree", "")}</td>'
            f'<td class="num">{c.get("n/a", "")}</td><td>{e(p.get("full_run", ""))}</td><td>{notes}</td></tr>'
        )
    parts += ["</table>", "</body></html>"]
    path = out / "index.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text("\n".join(parts) + "\n")
    tmp.replace(path)
    return path
