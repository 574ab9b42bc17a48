"""The KV handshake at scale: a prefill x decode matrix, one cell per pair coloured by its stage, and
the failing pairs listed under it (a 16P16D run has 256 pairs: a list would not fit)."""

from __future__ import annotations

from collections.abc import Callable

from rich.style import Style
from rich.text import Text

from ...core.run.events import RunState
from ..logtext import clean

# A pair's glyph and its colour, by name (the panel's `color`: ok, error, info, muted).
GLYPH = {"waiting": ("○", "muted"), "both_registered": ("◔", "info"),
         "ports_reachable": ("◑", "info"), "transferred": ("●", "ok"), "failed": ("×", "error")}
LEGEND = "○ waiting  ◔ registered  ◑ ports reachable  ● transferred  × failed"


def _short(name: str) -> str:
    """prefill-12 -> P12, decode-3 -> D3."""
    role, _, idx = name.rpartition("-")
    return (role[:1].upper() + idx) if idx.isdigit() else name


def pair_matrix(state: RunState, color: Callable[[str], Style], width: int = 56, max_failed: int = 8) -> Text:
    """The matrix as Text; `color(name)` gives the colour of a severity (the panel's component classes)."""
    prefills = list(dict.fromkeys(pr.prefill for pr in state.pairs.values()))
    decodes = list(dict.fromkeys(pr.decode for pr in state.pairs.values()))
    label_w = max((len(_short(p)) for p in prefills), default=2) + 1
    cols = max(1, (width - label_w) // 2)
    out = Text()
    for start in range(0, len(decodes), cols):  # wrap wide matrices into bands of columns
        band = decodes[start:start + cols]
        out.append(" " * label_w)
        out.append(" ".join(_short(d)[-1] if len(_short(d)) > 1 else _short(d) for d in band), style="dim")
        out.append(f"  {_short(band[0])}-{_short(band[-1])}\n" if len(band) > 1 else "\n", style="dim")
        for p in prefills:
            out.append(f"{_short(p):<{label_w}}", style="bold")
            for i, d in enumerate(band):
                pr = state.pairs.get(f"{p}>{d}")
                glyph, var = GLYPH.get(pr.stage if pr else "waiting", ("?", ""))
                out.append(glyph, style=color(var) if var else "")
                if i < len(band) - 1:
                    out.append(" ")
            out.append("\n")
    counts: dict[str, int] = {}
    for pr in state.pairs.values():
        counts[pr.stage] = counts.get(pr.stage, 0) + 1
    out.append(" · ".join(f"{n} {st.replace('_', ' ')}" for st, n in sorted(counts.items())), style="dim")
    failed = [pr for pr in state.pairs.values() if pr.stage == "failed"]
    err = color("error")
    for pr in failed[:max_failed]:
        out.append(f"\n× {pr.prefill} → {pr.decode}: ", style=Style(bold=True) + err)
        why = clean(pr.failed, 10_000)
        out.append(why if len(why) <= 240 else why[:239] + "…", style=err)
    if len(failed) > max_failed:
        out.append(f"\n… and {len(failed) - max_failed} more failing pairs", style=err)
    return out
