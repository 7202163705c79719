#!/usr/bin/env python3
"""Strict checks of the JSON that brisk and its programs write, for the tests.

Strict: NaN, Infinity and -Infinity (which Python's json module and printf's "%f"
let through, and jq and most parsers reject) and duplicate keys are errors.

    json_check.py lines [--min N] [--has-null KEY] [--expect TEXT] -- COMMAND...
        Runs COMMAND, which must exit 0; each line of its standard output that
        starts with '{' must be one JSON object (other lines, such as mpirun's or
        a table's, are left alone). At least N such lines (default 1); with
        --has-null, at least one of them holds KEY with the value null (the test
        reaches the case where a figure has no value). With --expect, the output
        (stdout and stderr) contains TEXT.

    json_check.py trace FILE --ranks N --tasks T --name NAME [--clock C] [--expect TEXT] [-- COMMAND...]
        The Chrome trace that brisk::timeline or --brisk-timeline wrote: one JSON
        document; a named row (process_name) and a pid label for each rank 0..N-1
        and no other; T distinct tasks named NAME as complete events ("X") with a
        start, a non-negative duration and a thread row that has a name; every rank
        ran at least one. With COMMAND, FILE is removed first, COMMAND must exit 0
        (and print TEXT), and then FILE is checked.

Exit status: 0 when every check holds, 1 otherwise (the first failure is named).
"""

import argparse
import json
import os
import subprocess
import sys


class Failed(Exception):
    pass


def reject_constant(name):
    raise ValueError(f"{name} is not JSON (a number that is not finite must be written as null)")


def reject_duplicates(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key '{key}'")
        obj[key] = value
    return obj


def strict_loads(text):
    return json.loads(text, parse_constant=reject_constant, object_pairs_hook=reject_duplicates)


def run(command, expect):
    """Runs COMMAND, echoes its output, and returns its stdout; fails unless it exits 0."""
    p = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    sys.stdout.flush()
    if p.returncode != 0:
        raise Failed(f"the command exited with {p.returncode}, wanted 0: {' '.join(command)}")
    if expect is not None and expect not in p.stdout + p.stderr:
        raise Failed(f"the output lacks '{expect}'")
    return p.stdout


def check_lines(text, minimum, has_null):
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = strict_loads(line)
        except ValueError as e:
            raise Failed(f"line {n} is not strict JSON ({e}): {line}")
        if not isinstance(record, dict):
            raise Failed(f"line {n} is not a JSON object: {line}")
        records.append(record)
    if len(records) < minimum:
        raise Failed(f"{len(records)} JSON lines, wanted at least {minimum}")
    for key in has_null:
        if not any(key in r and r[key] is None for r in records):
            raise Failed(f"no JSON line has '{key}': null (the case the test is for was not reached)")
    return f"{len(records)} JSON lines, all strict JSON objects"


def check_trace(path, ranks, tasks, name, clock):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise Failed(f"{path}: {e.strerror} (the timeline was not written)")
    try:
        trace = strict_loads(text)
    except ValueError as e:
        raise Failed(f"{path} is not strict JSON: {e}")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise Failed(f"{path}: no traceEvents list")
    other = trace.get("otherData", {})
    if clock is not None and other.get("clock") != clock:
        raise Failed(f"{path}: otherData.clock is {other.get('clock')!r}, wanted {clock!r}")
    if not isinstance(other.get("origin_ns"), int) or other["origin_ns"] <= 0:
        raise Failed(f"{path}: otherData.origin_ns is {other.get('origin_ns')!r}, not a positive integer")
    rows, labelled, threads = set(), set(), set()
    done = {}  # task id -> pid of its complete event
    for e in trace["traceEvents"]:
        if not isinstance(e, dict):
            raise Failed(f"{path}: an event that is not an object: {e!r}")
        ph, pid = e.get("ph"), e.get("pid")
        if ph == "M" and e.get("name") == "process_name":
            rows.add(pid)
        elif ph == "M" and e.get("name") == "process_labels":
            if str(e.get("args", {}).get("labels", "")).startswith("pid "):
                labelled.add(pid)
        elif ph == "M" and e.get("name") == "thread_name":
            threads.add((pid, e.get("tid")))
        elif ph == "X" and e.get("name") == name:
            ts, dur = e.get("ts"), e.get("dur")
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or dur < 0:
                raise Failed(f"{path}: a task event with ts {ts!r} and dur {dur!r}")
            task = e.get("args", {}).get("task")
            if task in done:
                raise Failed(f"{path}: task {task} has two complete events")
            done[task] = (pid, e.get("tid"))
    want = set(range(ranks))
    if rows != want:
        raise Failed(f"{path}: rows for ranks {sorted(rows)}, wanted {sorted(want)}")
    if labelled != want:
        raise Failed(f"{path}: pid labels for ranks {sorted(labelled)}, wanted {sorted(want)}")
    if len(done) != tasks:
        raise Failed(f"{path}: {len(done)} '{name}' tasks, wanted {tasks}")
    unnamed = [row for row in done.values() if row not in threads]
    if unnamed:
        raise Failed(f"{path}: tasks on thread rows without a name: {sorted(set(unnamed))}")
    idle = want - {pid for pid, _ in done.values()}
    if idle:
        raise Failed(f"{path}: no '{name}' task on the rows of ranks {sorted(idle)}")
    return f"{path}: {ranks} rank rows, {tasks} '{name}' tasks, strict JSON"


def main():
    argv = sys.argv[1:]
    command = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    lines = sub.add_parser("lines")
    lines.add_argument("--min", type=int, default=1)
    lines.add_argument("--has-null", action="append", default=[])
    lines.add_argument("--expect")
    trace = sub.add_parser("trace")
    trace.add_argument("file")
    trace.add_argument("--ranks", type=int, required=True)
    trace.add_argument("--tasks", type=int, required=True)
    trace.add_argument("--name", required=True)
    trace.add_argument("--clock")
    trace.add_argument("--expect")
    args = parser.parse_args(argv)
    try:
        if args.what == "lines":
            if not command:
                parser.error("lines: give the command after --")
            said = check_lines(run(command, args.expect), args.min, args.has_null)
        else:
            if command:
                if os.path.exists(args.file):
                    os.remove(args.file)
                run(command, args.expect)
            said = check_trace(args.file, args.ranks, args.tasks, args.name, args.clock)
    except Failed as e:
        print(f"json_check.py: FAILED: {e}")
        return 1
    print(f"json_check.py: ok: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
