"""The markdown table: one row per workload; each peer's median (min–max), the raw limit, ratios."""

from __future__ import annotations

from .results import RAW, Cell, Results, unsupported_reason


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
    if c.not_measurable:
        return "n/m"
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


def _cpu_list(cpus: list[int]) -> str:
    return ", ".join(str(c) for c in cpus)


def machine_line(meta: dict, code: str = "`") -> str:
    m = meta.get("machine", {})
    return (
        f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB, "
        f"Linux {m.get('kernel', '?')}, host {code}{m.get('host', '?')}{code}"
    )


def markdown(results: Results) -> str:
    meta = results.meta
    shared = [w for w in results.workloads if not w.get("peers")]
    limited = [w for w in results.workloads if w.get("peers")]
    lines = [
        f"Date: {meta.get('started', '?')} · Machine: {machine_line(meta)}",
        "",
        f"Command: `{meta.get('command', '?')}` · scale: {meta.get('scale', {}).get('note', '?')} · "
        f"runs per cell: {meta.get('runs', '?')} (median, min–max when more than one)",
    ]
    split = meta.get("cpu_split")
    if split:
        lines += ["", f"CPUs split (`--split-cpus`): the S3 server on CPU {_cpu_list(split['server'])}; "
                  f"the filesystems, workloads and raw client on CPU {_cpu_list(split['others'])}."]
    if meta.get("interleave"):
        lines += ["", "Runs interleaved (`--interleave`): for every run of a workload each target took one "
                  "turn (raw first, then the peers, the first of them rotating), not one target after "
                  "another — an A/B comparison of variants, not the mode of the cross-peer tables."]
    if shared:
        lines += ["", *_peer_table(results, shared)]
    if limited:
        lines += ["", *_limited_table(results, limited)]
    errors = [c for c in results.cells.values() if c.error and not c.not_measurable]
    if errors:
        lines += ["", "Errors (details in the JSON):", ""]
        lines += [f"- {c.workload} on {c.peer}: {_first_and_last_line(c.error or '')}{_why(meta, c)}"
                  for c in errors]
    unmeasured = [c for c in results.cells.values() if c.not_measurable]
    if unmeasured:
        lines += ["", "n/m, not measurable (no failure: the moment to measure did not come):", ""]
        lines += [f"- {c.workload} on {c.peer}: {_first_and_last_line(c.error or '')}" for c in unmeasured]
    return "\n".join(lines) + "\n"


def _peer_table(results: Results, workloads: list[dict]) -> list[str]:
    """Every peer beside the raw limit, with speed ratios."""
    fs_peers = [p for p in results.peers if p != RAW]
    others = [p for p in fs_peers if p != "msfs"]
    head = ["workload", "unit", "I/O", *fs_peers, "raw limit"]
    if "msfs" in fs_peers:
        head += ["msfs/raw", *[f"msfs/{p}" for p in others]]
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|",
    ]
    for w in workloads:
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
    no_raw = [w for w in workloads if not w.get("has_raw", True)]
    if no_raw:
        lines += ["", f"n/a: no raw limit for {', '.join(w['name'] for w in no_raw)} ({no_raw[0]['raw']})."]
    if any(w.get("writes") for w in workloads):
        fsync_clock = " write-fsync is timed until its fsync returns instead." if any(
            w["name"] == "write-fsync" for w in workloads) else ""
        lines += ["", "Write cells are timed until the store holds what was written (msfs with "
                  "`flush_on_close: true`; mount-s3 and s3fs upload in close; rclone, and "
                  "msfs-close-in-background with msfs's default `flush_on_close: false`, are timed until "
                  "the store lists the upload) and fail if a read-back check of the store finds a lost or "
                  f"wrong write.{fsync_clock}"]
    lines += _fsync_note(results, workloads, fs_peers)
    return lines


def _fsync_note(results: Results, workloads: list[dict], peers: list[str]) -> list[str]:
    """Under a table with an fsync cell (`write-fsync`): whose fsync returned before the store held
    the file (asked before the close, `store_held_at_fsync`), and whose waited."""
    waited: list[str] = []
    early: list[str] = []
    for w in workloads:
        for peer in peers:
            cell = results.get(w["name"], peer)
            held = [s.detail["store_held_at_fsync"] for s in (cell.samples if cell else [])
                    if "store_held_at_fsync" in s.detail]
            if not held:
                continue
            if all(held):
                waited.append(peer)
            else:
                early.append(peer if not any(held) else f"{peer} ({held.count(False)} of {len(held)} runs)")
    if not waited and not early:
        return []
    said = []
    if waited:
        said.append(f"the store held the file when fsync returned on {', '.join(waited)}")
    if early:
        said.append(f"it did not on {', '.join(early)}, whose figure is its local cache's rate, not the store's")
    return ["", f"fsync (write-fsync): {'; '.join(said)}."]


def _limited_table(results: Results, workloads: list[dict]) -> list[str]:
    """Workloads only some peers run (msfs's manifests), beside published reference figures."""
    peers = [p for p in results.peers if p != RAW and any(p in w["peers"] for w in workloads)]
    sources: list[str] = []
    for w in workloads:
        ref = w.get("reference")
        if ref and ref["source"] not in sources:
            sources.append(ref["source"])
    head = ["workload", "unit", *peers]
    if sources:
        head += ["reference", *[f"{p}/reference" for p in peers]]
    lines = [
        f"Only {', '.join(peers)} ({workloads[0]['raw']}):",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|",
    ]
    for w in workloads:
        row = [f"{w['name']} ({w['title']})", w["unit"]]
        row += [cell_text(results.get(w["name"], p)) if p in w["peers"] else "–" for p in peers]
        if sources:
            ref = w.get("reference")
            row.append(_reference_text(ref, sources) if ref else "–")
            for p in peers:
                mine = results.get(w["name"], p)
                row.append(_reference_ratio(mine, ref, w["higher_is_better"]) if ref and ref["comparable"] else "–")
        lines.append("| " + " | ".join(row) + " |")
    if sources:
        lines += ["", "References: " + "; ".join(f"[{i + 1}] {s}" for i, s in enumerate(sources)) + ". "
                  "A ratio is shown for rates only; a time or a memory peak measured at another "
                  "namespace size is shown beside ours, not divided by it."]
    return lines


def _reference_text(ref: dict, sources: list[str]) -> str:
    published = f" ({ref['published']})" if ref.get("published") else ""
    return f"{fmt(ref['value'])}{published} [{sources.index(ref['source']) + 1}]"


def _reference_ratio(mine: Cell | None, ref: dict, higher_is_better: bool) -> str:
    if mine is None or not mine.ok or mine.median <= 0 or ref["value"] <= 0:
        return "–"
    r = mine.median / ref["value"] if higher_is_better else ref["value"] / mine.median
    if r >= 10:
        return f"{r:.0f}x"
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"


def _why(meta: dict, c: Cell) -> str:
    """The peer's own reason when the cell does what it cannot do (so `error` reads as a limit)."""
    reason = unsupported_reason(meta, c.workload, c.peer)
    return f" (unsupported: {reason})" if reason else ""


def _first_and_last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if len(lines) < 2 else f"{lines[0]} … {lines[-1]}"
