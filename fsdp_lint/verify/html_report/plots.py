"""The report's plots, drawn by matplotlib and returned as inline SVG text.

Each function takes plain numbers (no record, no torch) and returns one ``<svg>`` element:
no XML prolog, no metadata block (matplotlib's names a licence URL), ids salted so that the
same figure gives the same text.  matplotlib is the ``report`` extra; this module is loaded
only by ``fsdp_lint.verify.html_report.write_*`` when ``--report`` is given.
"""

from __future__ import annotations

import io
import re
from typing import Dict, List, Optional, Sequence, Tuple

import matplotlib
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

FLAGGED = "#c0392b"
FIXED = "#2471a3"
BLOCKED = "#e67e22"
GRID = "#d5d8dc"
MIB = 1024 * 1024
# how a rank ended -> cell colour of the outcome grid
END_COLOURS = {
    "exit 0": "#27ae60",
    "exception": "#c0392b",
    "signal": "#8e44ad",
    "hung": BLOCKED,
    "stopped": "#95a5a6",
    "no record": "#bdc3c7",
}

_STYLE = {
    "svg.fonttype": "none",  # text stays text: smaller, selectable, searchable
    "svg.hashsalt": "fsdp-lint-report",  # the same figure gives the same ids
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": GRID,
    "grid.linewidth": 0.6,
}


def _figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _svg(figure: Figure, label: str) -> str:
    """The figure as an inline ``<svg>`` with an accessible name."""
    buffer = io.StringIO()
    with matplotlib.rc_context(_STYLE):
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    safe = label.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    return text.replace("<svg ", f'<svg role="img" aria-label="{safe}" class="plot" ', 1)


def _styled(draw):
    """Run ``draw`` (which builds a figure) under the report's style."""
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(_STYLE):
            return draw(*args, **kwargs)
    wrapper.__name__ = draw.__name__
    wrapper.__doc__ = draw.__doc__
    return wrapper


@_styled
def step_series(title: str, series: Dict[str, Dict[int, List[float]]], unit: str,
                gathered: Optional[Dict[str, Dict[int, List[float]]]] = None) -> str:
    """Per step values (``series[kind][rank]``, kind ``flagged``/``fixed``): one line per
    program and rank; ``gathered`` (bytes per step, same shape) adds a second panel."""
    panels = 2 if gathered else 1
    figure = _figure(4.2 * panels + 0.6, 2.8)
    axes = figure.subplots(1, panels, squeeze=False)[0]
    _lines(axes[0], series, f"step time ({unit})")
    axes[0].set_title("time per step", fontsize=9)
    if gathered:
        _lines(axes[1], {k: {r: [b / MIB for b in v] for r, v in ranks.items()} for k, ranks in gathered.items()},
               "MiB all-gathered")
        axes[1].set_title("bytes all-gathered per step", fontsize=9)
    figure.suptitle(title, fontsize=10)
    return _svg(figure, title)


def _lines(ax, series: Dict[str, Dict[int, List[float]]], ylabel: str) -> None:
    for kind, ranks in series.items():
        colour = FLAGGED if kind == "flagged" else FIXED
        for index, (rank, values) in enumerate(sorted(ranks.items())):
            ax.plot(range(1, len(values) + 1), values, color=colour, linewidth=1.2,
                    linestyle="-" if index == 0 else "--", marker="." if len(values) < 60 else None,
                    label=f"{kind}, rank {rank}")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, frameon=False)


@_styled
def rank_bars(title: str, values: Dict[str, Dict[int, float]], ylabel: str,
              reference: Optional[Tuple[float, str]] = None) -> str:
    """One bar per program (flagged, fixed) and rank: ``values[kind][rank]``;
    ``reference``: a dashed line (value, label), e.g. the full model's size."""
    figure = _figure(4.8, 2.8)
    ax = figure.subplots()
    ranks = sorted({rank for per_rank in values.values() for rank in per_rank})
    kinds = [k for k in ("flagged", "fixed") if k in values]
    width = 0.8 / max(1, len(kinds))
    for index, kind in enumerate(kinds):
        xs = [r + (index - (len(kinds) - 1) / 2) * width for r in ranks]
        heights = [values[kind].get(r, 0.0) for r in ranks]
        bars = ax.bar(xs, heights, width=width * 0.95, color=FLAGGED if kind == "flagged" else FIXED, label=kind)
        ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=1)
    if reference is not None:
        ax.axhline(reference[0], color="#555555", linestyle="--", linewidth=1, label=reference[1])
    ax.set_xticks(ranks, [f"rank {r}" for r in ranks])
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, frameon=False)
    ax.set_title(title, fontsize=10)
    return _svg(figure, title)


@_styled
def outcome_grid(title: str, ends: Dict[str, List[Tuple[int, str, str]]], seconds: Dict[str, float]) -> str:
    """How each rank of each program ended: ``ends[kind]`` = (rank, class, words), one
    column per program in the dict's order (``flagged``, ``fixed``; or the user's ``job``),
    the class one of ``END_COLOURS``; ``seconds[kind]``: the program's wall time."""
    kinds = list(ends)
    ranks = sorted({rank for rows in ends.values() for rank, _, _ in rows})
    figure = _figure(6.4, 0.75 + 0.42 * max(1, len(ranks)))
    ax = figure.subplots()
    for column, kind in enumerate(kinds):
        for rank, klass, words in ends[kind]:
            row = ranks.index(rank)
            ax.add_patch(Rectangle((column, row), 0.96, 0.9, color=END_COLOURS.get(klass, GRID)))
            short = words if len(words) <= 44 else words[:41] + "..."
            ax.text(column + 0.48, row + 0.45, short, ha="center", va="center", fontsize=7, color="white")
    ax.set_xlim(0, len(kinds))
    ax.set_ylim(len(ranks), 0)
    ax.set_xticks([c + 0.48 for c in range(len(kinds))],
                  [f"{k} program ({seconds[k]:.1f} s)" if k in seconds else f"{k} program" for k in kinds])
    ax.xaxis.tick_top()
    ax.set_yticks([r + 0.45 for r in range(len(ranks))], [f"rank {r}" for r in ranks])
    ax.grid(False)
    for side in ("left", "bottom", "top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(length=0)
    used = sorted({klass for rows in ends.values() for _, klass, _ in rows})
    ax.legend(handles=[Patch(color=END_COLOURS.get(k, GRID), label=k) for k in used], fontsize=7, frameon=False,
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title, fontsize=10, pad=18)
    return _svg(figure, title)


@_styled
def hang_lanes(title: str, lanes: Sequence[dict]) -> str:
    """Where each rank was when the job hung: one lane per rank.  A lane (dict): ``rank``,
    ``events`` [(seconds, label)], the rank's last observed calls, ``stopped`` (seconds, or
    None), ``blocked`` (the collective its stack was in, or None), ``at`` (its own code's
    innermost line, or ""), ``state`` (words, for a rank that was not hung)."""
    figure = _figure(8.4, 0.9 + 0.75 * max(1, len(lanes)))
    ax = figure.subplots()
    end = max([lane.get("stopped") or 0.0 for lane in lanes]
              + [t for lane in lanes for t, _ in lane.get("events", [])] + [1.0])
    for row, lane in enumerate(lanes):
        events = lane.get("events", [])
        ax.axhline(row, color=GRID, linewidth=6, zorder=0)
        for index, (t, label) in enumerate(events):
            ax.plot([t], [row], marker="o", color=FIXED, markersize=4, zorder=2)
            ax.annotate(label, (t, row), xytext=(0, 7 + 8 * (index % 2)), textcoords="offset points", fontsize=6,
                        rotation=0, ha="center", color="#34495e")
        last = events[-1][0] if events else 0.0
        stopped = lane.get("stopped") or end
        if lane.get("blocked"):
            ax.barh(row, max(stopped - last, end * 0.01), left=last, height=0.32, color=BLOCKED, zorder=1)
            words = f"blocked in {lane['blocked']}" + (f" at {lane['at']}" if lane.get("at") else "")
            ax.annotate(words, (last, row), xytext=(2, -13), textcoords="offset points", fontsize=7,
                        color="#a04000", ha="left")
        elif lane.get("state"):
            ax.annotate(lane["state"], (last, row), xytext=(2, -13), textcoords="offset points", fontsize=7,
                        color="#555555", ha="left")
    ax.set_yticks(range(len(lanes)), [f"rank {lane['rank']}" for lane in lanes])
    ax.set_ylim(len(lanes) - 0.4, -0.7)
    ax.set_xlim(-end * 0.02, end * 1.05)
    ax.set_xlabel("seconds since the rank started (its last observed calls, then where its stack was stopped)")
    ax.grid(axis="y", visible=False)
    ax.set_title(title, fontsize=10)
    return _svg(figure, title)


@_styled
def site_timeline(title: str, lanes: Dict[int, dict], end: float) -> str:
    """When a finding's site ran on each rank: ``lanes[rank]`` = {"steps": [seconds],
    "ran": [seconds], "hazard": [seconds]}, over the job's time."""
    ranks = sorted(lanes)
    figure = _figure(7.2, 0.8 + 0.5 * max(1, len(ranks)))
    ax = figure.subplots()
    for row, rank in enumerate(ranks):
        lane = lanes[rank]
        ax.axhline(row, color=GRID, linewidth=5, zorder=0)
        if lane.get("steps"):
            ax.plot(lane["steps"], [row] * len(lane["steps"]), linestyle="none", marker="|", color="#7f8c8d",
                    markersize=9, label="optimizer step" if row == 0 else None)
        if lane.get("ran"):
            ax.plot(lane["ran"], [row] * len(lane["ran"]), linestyle="none", marker="o", color=FIXED, markersize=4,
                    label="the site ran" if row == 0 else None)
        if lane.get("hazard"):
            ax.plot(lane["hazard"], [row] * len(lane["hazard"]), linestyle="none", marker="X", color=FLAGGED,
                    markersize=7, label="hazard observed" if row == 0 else None)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.set_ylim(len(ranks) - 0.5, -0.5)
    ax.set_xlim(0, max(end, 1e-3) * 1.03)
    ax.set_xlabel("seconds since the rank started")
    ax.grid(axis="y", visible=False)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title, fontsize=10)
    return _svg(figure, title)


@_styled
def verdict_grid(title: str, rows: List[str], columns: List[str], cells: Dict[Tuple[str, str], str],
                 colours: Dict[str, str]) -> str:
    """A rule-by-torch grid coloured by verdict: ``cells[(row, column)]`` = verdict."""
    figure = _figure(1.8 + 1.5 * max(1, len(columns)), 0.9 + 0.28 * max(1, len(rows)))
    ax = figure.subplots()
    for r, row in enumerate(rows):
        for c, column in enumerate(columns):
            verdict = cells.get((row, column))
            colour = colours.get(verdict, "#ffffff") if verdict else "#ffffff"
            ax.add_patch(Rectangle((c, r), 0.97, 0.92, color=colour))
            ax.text(c + 0.485, r + 0.46, verdict or "-", ha="center", va="center", fontsize=6.5,
                    color="white" if verdict else "#999999")
    ax.set_xlim(0, len(columns))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([c + 0.485 for c in range(len(columns))], columns, fontsize=7.5)
    ax.xaxis.tick_top()
    ax.set_yticks([r + 0.46 for r in range(len(rows))], rows, fontsize=7.5)
    ax.grid(False)
    ax.tick_params(length=0)
    for side in ("left", "bottom", "top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(title, fontsize=10, pad=14)
    return _svg(figure, title)
