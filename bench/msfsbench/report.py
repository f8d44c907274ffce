"""The markdown table: one row per workload; each peer's median (min–max), the raw limit, ratios."""

from __future__ import annotations

from .results import RAW, Cell, Results


def fmt(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def cell_text(c: Cell | None) -> str:
    if c is None:
        return "–"
    if not c.ok:
        return "error"
    if len(c.values) == 1:
        return fmt(c.median)
    return f"{fmt(c.median)} ({fmt(min(c.values))}–{fmt(max(c.values))})"


def speed_ratio(msfs: Cell | None, other: Cell | None, higher_is_better: bool) -> str:
    """How many times faster msfs is than `other` (below 1: slower), whatever the unit."""
    if msfs is None or other is None or not msfs.ok or not other.ok or min(msfs.median, other.median) <= 0:
        return "–"
    r = msfs.median / other.median if higher_is_better else other.median / msfs.median
    if r >= 10:
        return f"{r:.0f}x"
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"


def machine_line(meta: dict, code: str = "`") -> str:
    m = meta.get("machine", {})
    return (
        f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB, "
        f"Linux {m.get('kernel', '?')}, host {code}{m.get('host', '?')}{code}"
    )


def markdown(results: Results) -> str:
    meta = results.meta
    fs_peers = [p for p in results.peers if p != RAW]
    others = [p for p in fs_peers if p != "msfs"]
    head = ["workload", "unit", "I/O", *fs_peers, "raw limit"]
    if "msfs" in fs_peers:
        head += ["msfs/raw", *[f"msfs/{p}" for p in others]]
    lines = [
        f"Date: {meta.get('started', '?')} · Machine: {machine_line(meta)}",
        "",
        f"Command: `{meta.get('command', '?')}` · scale: {meta.get('scale', {}).get('note', '?')} · "
        f"runs per cell: {meta.get('runs', '?')} (median, min–max when more than one)",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|",
    ]
    for w in results.workloads:
        name, hib = w["name"], w["higher_is_better"]
        row = [f"{w['name']} ({w['title']})", w["unit"], w["io"]]
        row += [cell_text(results.get(name, p)) for p in fs_peers]
        row.append(cell_text(results.get(name, RAW)) if w.get("has_raw", True) else "n/a")
        if "msfs" in fs_peers:
            msfs = results.get(name, "msfs")
            row.append(speed_ratio(msfs, results.get(name, RAW), hib))
            row += [speed_ratio(msfs, results.get(name, p), hib) for p in others]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Ratios are speed ratios on the medians: above 1 msfs is faster (for MiB/s, msfs ÷ other; "
        "for seconds, other ÷ msfs). For cold workloads msfs/raw is the fraction of the physical limit "
        "reached; for cache-resident ones the raw column is what going back to the server would "
        "deliver, so above 1 is the cache's gain.",
    ]
    no_raw = [w for w in results.workloads if not w.get("has_raw", True)]
    if no_raw:
        lines += ["", f"n/a: no raw limit for {', '.join(w['name'] for w in no_raw)} ({no_raw[0]['raw']})."]
    write_cells = [w["name"] for w in results.workloads if w.get("writes")]
    if write_cells:
        lines += ["", "Write cells are timed until the store holds what was written (msfs with "
                  "`flush_on_close: true`; s3fs uploads in close; rclone is timed until the store lists "
                  "the upload) and fail if a read-back check of the store finds a lost or wrong write."]
    errors = [(c, c.error) for c in results.cells.values() if c.error]
    if errors:
        lines += ["", "Errors (details in the JSON):", ""]
        lines += [f"- {c.workload} on {c.peer}: {_first_and_last_line(e)}" for c, e in errors]
    return "\n".join(lines) + "\n"


def _first_and_last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if len(lines) < 2 else f"{lines[0]} … {lines[-1]}"
