#!/usr/bin/env python3
"""benchmarks/distributed/suite.sh on a few ranks: every program of the suite ran and
exited 0, each wrote strict JSON lines, and floors.py gave every figure that has a
floor a value. Whether a value meets its floor is not judged here (timings on a
loaded machine): "met" and "MISSED" both pass; "NONE" (a program printed null: it
measured nothing) fails, as does a program that failed.

    suite_test.py --programs N [--figure LABEL]... -- SUITE_COMMAND...

--programs: how many programs the suite runs for these options; --figure: the start
of a figure's label (as floors.py prints it) that must be there with a value.
"""

import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from json_check import strict_loads  # noqa: E402

# floors.py's lines: "  met     LABEL: VALUE ...", "  MISSED  ...", "  NONE    ...", "  --      ...".
FIGURE = re.compile(r"^  (met   |MISSED|NONE  |--    )  (.*?): (.*)$")
SUMMARY = re.compile(r"^floors: ([0-9]+) met, ([0-9]+) missed(.*)$")


def fail(what):
    print(f"suite_test: FAILED: {what}")
    sys.exit(1)


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        fail("usage: suite_test.py --programs N [--figure LABEL]... -- SUITE_COMMAND...")
    at = argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("--programs", type=int, required=True)
    parser.add_argument("--figure", action="append", default=[])
    args = parser.parse_args(argv[:at])
    command = argv[at + 1:]
    started = time.time()
    p = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    sys.stdout.write(p.stdout + p.stderr)
    # 0: every figure met its floor; 1: one missed it (or had none: checked below); 2: a program failed.
    if p.returncode not in (0, 1):
        fail(f"suite.sh exited with {p.returncode} (2: a program failed or timed out)")
    ran = re.search(r"^suite.sh: ([0-9]+) of ([0-9]+) programs ran \(output in (.*)\)$", p.stderr, re.M)
    if not ran or ran.group(1) != ran.group(2):
        fail("no line 'suite.sh: N of N programs ran'")
    if int(ran.group(1)) != args.programs:
        fail(f"the suite ran {ran.group(1)} programs, wanted {args.programs}")
    out_dir = ran.group(3)
    files = sorted(f for f in os.listdir(out_dir) if f.endswith(".json"))
    if len(files) != args.programs:
        fail(f"{len(files)} output files in {out_dir}, wanted {args.programs}: {files}")
    for name in files:
        if os.path.getmtime(os.path.join(out_dir, name)) < started - 1:
            fail(f"{name} in {out_dir} is from an earlier run")
        lines = 0
        with open(os.path.join(out_dir, name), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if not line.strip().startswith("{"):
                    continue
                try:
                    strict_loads(line)
                except ValueError as e:
                    fail(f"{name}:{n} is not strict JSON ({e}): {line.strip()}")
                lines += 1
        if lines == 0:
            fail(f"{name} holds no JSON line")

    judged, labels = 0, []
    summary = None
    for line in p.stdout.splitlines():
        m = FIGURE.match(line)
        if m:
            verdict, label = m.group(1).strip(), m.group(2)
            if verdict == "NONE":
                fail(f"a figure without a value (the program printed null): {line.strip()}")
            judged += verdict in ("met", "MISSED")
            labels.append(label)
            continue
        s = SUMMARY.match(line)
        if s:
            summary = s
    if summary is None:
        fail("no summary line 'floors: M met, K missed'")
    if summary.group(3):
        fail(f"the summary names figures without a value: {summary.group(0)}")
    if int(summary.group(1)) + int(summary.group(2)) != judged:
        fail(f"the summary counts {summary.group(1)} + {summary.group(2)} figures, the lines {judged}")
    for want in args.figure:
        if not any(label.startswith(want) for label in labels):
            fail(f"no figure '{want}' in floors.py's output")
    print(f"suite_test: ok: {args.programs} programs ran, {judged} figures with a floor, each with a value "
          f"({summary.group(1)} met, {summary.group(2)} missed: not judged here)")


if __name__ == "__main__":
    main()
