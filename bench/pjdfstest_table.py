#!/usr/bin/env python3
"""The per-group table of bench/pjdfstest-peers.sh: one row per pjdfstest group, one column group
per peer (passed/failed/crashed/skipped and the share passed of the tests that ran), read from
the OUTPUTS/PEER-GROUP.out files the script wrote. A test the peer died in is marked `NAME
CRASHED` there; a test that never reported at all is counted as not run.

Standard library only; the output parser is the conformance run's own.
"""

import argparse
import os
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts", "conformance"))
from pjdfstest_results import parse_output  # noqa: E402

STATUSES = ("pass", "fail", "crash", "skip", "not run")


def results_of(path):
    """name -> status for one peer and group."""
    results = OrderedDict((name, status) for name, (status, _) in parse_output(path).items())
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            name, _, mark = line.strip().partition("  ")
            if mark == "CRASHED":
                results[name] = "crash"
    return results


def counts(names, results):
    c = dict.fromkeys(STATUSES, 0)
    for name in names:
        c[results.get(name, "not run")] += 1
    return c


def cell(c):
    ran = c["pass"] + c["fail"] + c["crash"]
    share = f"{100 * c['pass'] / ran:.0f}%" if ran else "-"
    text = f"{c['pass']} / {c['fail']} / {c['crash']} / {c['skip']} | {share}"
    if c["not run"]:
        text += f" ({c['not run']} not run)"
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", required=True, help="every test name, one a line, run order")
    parser.add_argument("--outputs", required=True, help="directory of PEER-GROUP.out files")
    parser.add_argument("--peers", nargs="+", required=True)
    args = parser.parse_args()

    with open(args.names, encoding="utf-8") as f:
        names = [line.strip() for line in f if line.strip()]
    groups = OrderedDict()
    for name in names:
        groups.setdefault(name.split("::")[0], []).append(name)

    header = "| group |" + "".join(f" {p}: passed / failed / crashed / skipped | {p} passed |" for p in args.peers)
    print(header)
    print("|---|" + "---:|---:|" * len(args.peers))
    totals = {peer: dict.fromkeys(STATUSES, 0) for peer in args.peers}
    for group, members in sorted(groups.items()):
        row = f"| {group} |"
        for peer in args.peers:
            path = os.path.join(args.outputs, f"{peer}-{group}.out")
            results = results_of(path) if os.path.exists(path) else {}
            c = counts(members, results)
            for status in STATUSES:
                totals[peer][status] += c[status]
            row += f" {cell(c)} |"
        print(row)
    print("| **total** |" + "".join(f" {cell(totals[p])} |" for p in args.peers))


if __name__ == "__main__":
    main()
