#!/usr/bin/env python3
"""Compares one pjdfstest run on msfs with the expected results (scripts/conformance.sh).

pjdfstest prints one line per test case, `NAME  ok|FAILED|skipped|...`, the panic message of a
failure on the lines after it. This reads that output and

  - prints pass/fail/skip counts per group (the first part of a name: chmod, open, rename, ...);
  - fails (exit 1) on a test that failed but is not listed in the expected file, on a listed
    test that passed, on a listed name that did not fail for another reason (skipped, or no such
    test), and on tests that never reported (pjdfstest stopped: msfs crashed or hung);
  - with --update, rewrites the expected file from this run instead: the failed tests, each
    keeping its old reason, new ones with reason TODO. Entries of tests that did not run (the
    crash list) are kept as they are.

The expected file and the crash list have one test a line, `NAME  reason`; lines starting with `#`
are comments.
Standard library only: the test machines have no extra pip packages.
"""

import argparse
import re
import sys
from collections import OrderedDict

RESULT = re.compile(
    r"^(?P<name>[a-z0-9_]+(?:::[a-z0-9_]+)+)\s+"
    r"(?P<status>ok|FAILED|skipped|failed as expected|PASSED UNEXPECTEDLY)\s*$"
)
ERRNO = re.compile(r"\bE[A-Z0-9]{2,}\b")
# How much of a failure message the report shows: enough for the errno and the assertion.
MESSAGE_CHARS = 240


def parse_output(path):
    """name -> (status, message) in the order pjdfstest ran them; status is pass, fail or skip."""
    results = OrderedDict()
    current = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            match = RESULT.match(line)
            if match:
                status = {
                    "ok": "pass",
                    "PASSED UNEXPECTEDLY": "pass",
                    "FAILED": "fail",
                    "failed as expected": "fail",
                    "skipped": "skip",
                }[match.group("status")]
                current = match.group("name")
                results[current] = [status, []]
            elif line.startswith("Summary:") or line.startswith("Backtrace:"):
                # A backtrace (RUST_BACKTRACE set) follows the message: not part of it.
                current = None
            elif current is not None and line.strip():
                results[current][1].append(line.strip())
    return OrderedDict((name, (status, " ".join(msg))) for name, (status, msg) in results.items())


def read_list(path):
    """NAME -> reason from an expected file or crash list; a missing file is an empty list."""
    entries = OrderedDict()
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                name, _, reason = line.partition(" ")
                entries[name] = reason.strip() or "TODO"
    except FileNotFoundError:
        pass
    return entries


def header_of(path):
    """The leading comment block of the expected file, kept by --update."""
    lines = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    lines.append(line)
                else:
                    break
    except FileNotFoundError:
        pass
    return "".join(lines)


def short(message):
    errnos = sorted(set(ERRNO.findall(message)))
    text = message if len(message) <= MESSAGE_CHARS else message[: MESSAGE_CHARS - 3] + "..."
    return (f"[{', '.join(errnos)}] " if errnos else "") + text


def group_of(name):
    return name.split("::", 1)[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="pjdfstest's output on the msfs mount")
    parser.add_argument("--names", required=True, help="every test name, one a line, in run order")
    parser.add_argument("--expected", required=True)
    parser.add_argument("--crashes", required=True, help="tests not run: they crash msfs today")
    parser.add_argument("--update", action="store_true")
    args = parser.parse_args()

    results = parse_output(args.output)
    with open(args.names, encoding="utf-8") as f:
        names = [n.strip() for n in f if n.strip()]
    expected = read_list(args.expected)
    crashes = read_list(args.crashes)

    # --- per-group summary -------------------------------------------------------------------
    groups = OrderedDict()
    for name in sorted(names, key=group_of):
        counts = groups.setdefault(group_of(name), {"pass": 0, "fail": 0, "skip": 0, "not run": 0})
        if name in results:
            counts[results[name][0]] += 1
        else:
            counts["not run"] += 1
    print(f"{'group':<16}{'passed':>8}{'failed':>8}{'skipped':>9}{'not run':>9}")
    totals = {"pass": 0, "fail": 0, "skip": 0, "not run": 0}
    for group, counts in groups.items():
        print(f"{group:<16}{counts['pass']:>8}{counts['fail']:>8}{counts['skip']:>9}{counts['not run']:>9}")
        for key in totals:
            totals[key] += counts[key]
    print(f"{'total':<16}{totals['pass']:>8}{totals['fail']:>8}{totals['skip']:>9}{totals['not run']:>9}")

    # --- comparison --------------------------------------------------------------------------
    failed = [n for n, (s, _) in results.items() if s == "fail"]
    unexpected_fail = [n for n in failed if n not in expected]
    unexpected_pass = [n for n in expected if results.get(n, ("",))[0] == "pass"]
    stale = [
        n for n in expected
        if n not in crashes and (n not in names or results.get(n, ("",))[0] == "skip")
    ]
    # Never reported although meant to run: pjdfstest stopped there (msfs died or a call hung).
    missing = [n for n in names if n not in results and n not in crashes]

    if args.update:
        kept = [n for n in expected if n in crashes and n not in results]
        header = header_of(args.expected)
        with open(args.expected, "w", encoding="utf-8") as f:
            f.write(header)
            entries = sorted(set(failed) | set(kept))
            width = max((len(n) for n in entries), default=0)
            for name in entries:
                f.write(f"{name:<{width}}  {expected.get(name, 'TODO')}\n")
        todo = [n for n in failed if n not in expected]
        print(f"\nrewrote {args.expected}: {len(set(failed) | set(kept))} entries "
              f"({len(todo)} new with reason TODO, {len(unexpected_pass)} dropped as passing, "
              f"{len(stale)} dropped as stale)")
        for name in todo:
            print(f"  TODO  {name}: {short(results[name][1])}")

    problems = 0
    if missing:
        problems += 1
        print(f"\n{len(missing)} tests never reported (pjdfstest stopped: msfs crashed or a call "
              f"hung); the first is {missing[0]}:")
        for name in missing[:20]:
            print(f"  {name}")
    if not args.update:
        if unexpected_fail:
            problems += 1
            print(f"\n{len(unexpected_fail)} unexpected failures (not in {args.expected}):")
            for name in unexpected_fail:
                print(f"  {name}: {short(results[name][1])}")
        if unexpected_pass:
            problems += 1
            print(f"\n{len(unexpected_pass)} unexpected passes (listed in {args.expected}; "
                  "remove them, or run with --update):")
            for name in unexpected_pass:
                print(f"  {name}  ({expected[name]})")
        if stale:
            problems += 1
            print(f"\n{len(stale)} entries in {args.expected} name a test that was skipped or "
                  "does not exist:")
            for name in stale:
                print(f"  {name}")
    if crashes:
        print(f"\nnot run, they crash msfs today ({args.crashes}):")
        for name, reason in crashes.items():
            print(f"  {name}  {reason}")
    todo_left = [n for n, r in expected.items() if r == "TODO"]
    if todo_left and not args.update:
        print(f"\nnote: {len(todo_left)} entries still have reason TODO in {args.expected}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
