#!/usr/bin/env python3
"""Checks benchmark output against the floors that brisk's issues set.

Reads the JSON lines of brisk_cluster_workloads, brisk_template_costs and
benchmarks/physbam/compare.sh (other lines, such as mpirun's, are skipped) and
prints, per file, each figure that has a floor, its value, the floor and whether
the figure meets it, then the figures that are only reported (throughput).

    benchmarks/distributed/floors.py OUT/*.json
    benchmarks/distributed/floors.py --missed-only OUT/*.json

The floors (docs/BENCHMARKS.md has the figures and their commands):
  remote_e2e                median <= 20 us
  object_transfer           ratio_like_for_like >= 0.7 for every object >= 1 MiB
  spill                     efficiency >= 0.9
  template_install          controller and worker <= 5 us per task
  template_instantiate      >= 5,000,000 tasks/s through the controller
  template_edit[_each_sent] controller <= 10 us per edit, a rank <= 10 us per edit message
  physbam_compare (brisk)   frame within 5 % of hand-written MPI (ratio of medians <= 1.05)

A figure the benchmark printed as null (it measured none: under load the empty
read's round trip can exceed a small read's time) is listed as NONE.

Exit status: 0 when every figure found meets its floor, 1 when one misses it or
has no figure, 2 for unreadable input (the message names the file and line).
"""

import argparse
import json
import sys

MIB = 1 << 20


class BadInput(Exception):
    pass


def need(record, key, where):
    if key not in record:
        raise BadInput(f"{where}: a '{record.get('benchmark') or record.get('name')}' line has no '{key}'")
    value = record[key]
    if value is None:
        return None  # the benchmark measured no figure (printed as null)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise BadInput(f"{where}: '{key}' is {value!r}, not a number")
    return float(value)


def not_json(name):
    """Python's json module reads NaN and Infinity, which are not JSON (a figure
    with no value is null): refuse them, as jq and other readers do."""
    raise ValueError(f"{name} is not JSON; a figure without a value is null")


def size_label(n):
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n} B"


def checks_of(record, where):
    """(label, value, unit, floor, at_most) for each floor this line carries, and
    (label, value, unit) for each figure that is only reported."""
    kind = record.get("benchmark") or record.get("name")
    floors, reported = [], []
    if kind == "remote_e2e":
        floors.append(("remote e2e, median", need(record, "median", where), "us", 20.0, True))
    elif kind == "object_transfer":
        size = int(need(record, "bytes", where))
        if size >= MIB:
            label = f"object transfer, {record.get('object', '?')}, {record.get('path', '?')}, {size_label(size)}"
            floors.append((label, need(record, "ratio_like_for_like", where), "of raw", 0.7, False))
    elif kind == "spill":
        floors.append(("spill-over efficiency", need(record, "efficiency", where), "", 0.9, False))
    elif kind == "throughput":
        label = f"throughput, submitted by {record.get('submitter', '?')}"
        reported.append((label, need(record, "tasks_per_s", where), "tasks/s"))
    elif kind == "template_install":
        floors.append(("template install, controller", need(record, "controller_us_per_task", where), "us/task", 5.0, True))
        floors.append(("template install, worker", need(record, "worker_us_per_command_max", where), "us/task", 5.0, True))
    elif kind == "template_instantiate":
        floors.append(("template instantiate, controller", need(record, "controller_tasks_per_s", where), "tasks/s",
                       5e6, False))
        reported.append(("template instantiate, end to end", need(record, "end_to_end_tasks_per_s", where), "tasks/s"))
    elif kind in ("template_edit", "template_edit_each_sent"):
        what = "template edit" if kind == "template_edit" else "template edit sent on its own"
        floors.append((f"{what}, controller", need(record, "controller_us_per_edit", where), "us", 10.0, True))
        # A rank's time per edit message (per edit, where each is sent on its own).
        for key in ("worker_us_per_edit_max", "worker_us_per_edit_message_max"):
            if key in record:
                floors.append((f"{what}, worker, per message", need(record, key, where), "us", 10.0, True))
        reported.append((f"{what}, worker, per edited command", need(record, "worker_us_per_edited_command_max", where),
                         "us"))
    elif kind == "physbam_compare":
        variant = record.get("variant", "?")
        ratio = need(record, "ratio_of_medians", where)
        paired = need(record, "paired_ratio_median", where)
        label = f"physbam_like {variant} vs MPI, ratio of medians (paired {fmt_value(paired)})"
        if variant == "brisk":
            floors.append((label, ratio, "", 1.05, True))
        else:
            reported.append((label, ratio, ""))
    return floors, reported


def fmt_value(v):
    if v is None:
        return "none"
    if abs(v) >= 1e5:
        return f"{v:,.0f}"
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"


def fmt_floor(v):
    return f"{v:,.0f}" if abs(v) >= 1e5 else f"{v:g}"


def read_file(path):
    """The lines with a floor or a reported figure, and the runs' transport/ranks."""
    floors, reported, transports, ranks = [], [], set(), set()
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}")
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line.startswith("{"):
            continue
        where = f"{path}:{n}"
        try:
            record = json.loads(line, parse_constant=not_json)
        except json.JSONDecodeError as e:
            raise BadInput(f"{where}: not a JSON line ({e.msg} at column {e.colno})")
        except ValueError as e:
            raise BadInput(f"{where}: not a JSON line ({e})")
        if not isinstance(record, dict):
            raise BadInput(f"{where}: a JSON line that is not an object")
        f, r = checks_of(record, where)
        floors += f
        reported += r
        if "transport" in record:
            transports.add(str(record["transport"]))
        if isinstance(record.get("ranks"), int):
            ranks.add(record["ranks"])
    tags = sorted(transports)
    if ranks:
        tags.append(" and ".join(str(r) for r in sorted(ranks)) + (" ranks" if ranks != {1} else " rank"))
    return floors, reported, tags


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="files of JSON lines")
    parser.add_argument("--missed-only", action="store_true", help="print only the figures below their floor")
    args = parser.parse_args()
    met = missed = unmeasured = 0
    try:
        results = [(path, *read_file(path)) for path in args.files]
    except BadInput as e:
        print(f"floors.py: {e}", file=sys.stderr)
        return 2
    for path, floors, reported, tags in results:
        lines = []
        for label, value, unit, floor, at_most in floors:
            bound = f"{'<=' if at_most else '>='} {fmt_floor(floor)}"
            if value is None:
                unmeasured += 1
                lines.append(f"  NONE    {label}: no figure (null in the output) (floor {bound})")
                continue
            ok = value <= floor if at_most else value >= floor
            met += ok
            missed += not ok
            if ok and args.missed_only:
                continue
            lines.append(f"  {'met   ' if ok else 'MISSED'}  {label}: {fmt_value(value)}{' ' + unit if unit else ''} (floor {bound})")
        if not args.missed_only:
            lines += [f"  --      {label}: {fmt_value(value)}{' ' + unit if unit else ''}" for label, value, unit in reported]
        if lines or not (floors or reported):
            about = ", ".join(tags) if floors or reported else "no figures with a floor"
            print(f"{path} ({about})")
            for line in lines:
                print(line)
    print(f"floors: {met} met, {missed} missed" + (f", {unmeasured} without a figure" if unmeasured else ""))
    return 1 if missed or unmeasured else 0


if __name__ == "__main__":
    sys.exit(main())
