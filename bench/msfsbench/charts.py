"""PNG charts: one per workload family, grouped bars (one group per workload, one bar per peer),
min–max whiskers, log scale when the values span more than a factor of 30."""

from __future__ import annotations

from pathlib import Path

from .report import fmt, machine_line
from .results import RAW, Results

REFERENCE = "reference"  # a workload's published figure (the seed's), not a peer
COLORS = {"msfs": "#1f77b4", "mount-s3": "#d62728", "s3fs": "#ff7f0e", "rclone": "#2ca02c", RAW: "#7f7f7f",
          REFERENCE: "#bcbd22"}
LOG_SPREAD = 30.0


def render(results: Results, base: Path) -> list[Path]:
    """Writes `<base>-<family>.png` for every family with results; returns the paths."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    families: dict[str, str] = results.meta.get("families", {})
    paths = []
    for fam in dict.fromkeys(w["family"] for w in results.workloads):
        workloads = [w for w in results.workloads if w["family"] == fam]
        path = base.parent / f"{base.name}-{fam}.png"
        _family_chart(plt, results, fam, families.get(fam, fam), workloads, path)
        paths.append(path)
    return paths


def _family_chart(plt, results: Results, fam: str, title: str, workloads: list[dict], path: Path) -> None:
    peers = [p for p in results.peers if any(_ok(results, w["name"], p) for w in workloads)]
    if any(_drawn_reference(w) for w in workloads):
        peers.append(REFERENCE)  # published figures, drawn hatched beside the measured ones
    n, width = len(peers), 0.8 / max(1, len(peers))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(workloads) * max(1, n) * 0.45 + 2), 4.8), dpi=110)
    values = []
    for i, peer in enumerate(peers):
        xs, ys, lo, hi = [], [], [], []
        for j, w in enumerate(workloads):
            if peer == REFERENCE:
                if not _drawn_reference(w):
                    continue
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(w["reference"]["value"])
                lo.append(0.0)
                hi.append(0.0)
                continue
            c = results.get(w["name"], peer)
            if c is not None and (c.not_measurable or c.error):
                ax.annotate("n/m" if c.not_measurable else "error", (j - 0.4 + width * (i + 0.5), 0),
                            xycoords=("data", "axes fraction"), ha="center", va="bottom", fontsize=6.5,
                            color="#555555", xytext=(0, 2), textcoords="offset points")
            if c is None or not c.ok:
                continue
            xs.append(j - 0.4 + width * (i + 0.5))
            ys.append(c.median)
            lo.append(c.median - min(c.values))
            hi.append(max(c.values) - c.median)
        values += ys
        label = {RAW: "raw S3 (physical limit)", REFERENCE: _reference_label(workloads)}.get(peer, peer)
        bars = ax.bar(xs, ys, width * 0.92, label=label, color=COLORS.get(peer, None),
                      yerr=[lo, hi], capsize=2, error_kw={"elinewidth": 0.8},
                      hatch="//" if peer == REFERENCE else None, edgecolor="white" if peer == REFERENCE else None)
        for bar, y in zip(bars, ys):
            ax.annotate(fmt(y), (bar.get_x() + bar.get_width() / 2, y), ha="center", va="bottom",
                        fontsize=6.5, rotation=90 if n * len(workloads) > 12 else 0,
                        xytext=(0, 2), textcoords="offset points")
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > LOG_SPREAD:
        ax.set_yscale("log")
    unit = workloads[0]["unit"]
    better = "higher is better" if workloads[0]["higher_is_better"] else "lower is better"
    ax.set_ylabel(f"{unit} ({better})")
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels([w["title"] for w in workloads], rotation=20 if len(workloads) > 4 else 0,
                       ha="right" if len(workloads) > 4 else "center", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.margins(y=0.15)
    if ax.get_legend_handles_labels()[0]:  # (nothing to label when every cell failed)
        ax.legend(fontsize=8, loc="best")
    ax.grid(axis="y", alpha=0.3, which="both")
    meta = results.meta
    fig.text(0.01, 0.01, f"{meta.get('started', '')[:10]} · {machine_line(meta, code='')} · "
             f"{meta.get('scale', {}).get('name', '')} scale, {meta.get('runs', '?')} run(s)"
             f"{', interleaved' if meta.get('interleave') else ''}, median with min–max",
             fontsize=6.5, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path)
    plt.close(fig)


def _drawn_reference(w: dict) -> bool:
    """Only a comparable reference (a rate) is drawn: a bar of a time or a memory peak measured at
    another size would invite the comparison the table declines to make."""
    ref = w.get("reference")
    return bool(ref and ref.get("comparable", True))


def _reference_label(workloads: list[dict]) -> str:
    sources = list(dict.fromkeys(w["reference"]["source"] for w in workloads if _drawn_reference(w)))
    # "seed's user guide: 100M objects in ..., c5a.12xlarge ..." -> "seed's user guide"
    short = {s.split(":")[0] for s in sources}
    return f"{', '.join(sorted(short))}, published (its scale and machine: see the table)"


def _ok(results: Results, workload: str, peer: str) -> bool:
    c = results.get(workload, peer)
    return c is not None and c.ok
