#!/usr/bin/env python3
"""Lays the kernel's scheduling records over a brisk timeline: for each task of a
name, how long it took to start, to run and to come back to the thread that got it,
and which threads of which ranks ran, or were runnable and waited for a core,
meanwhile (from the submit to the get), and how long each CPU sat idle.

    perf sched record -k mono -o sched.data -- \\
        mpirun -np 4 ... PROGRAM --brisk-timeline=tl.json
    perf script -i sched.data -F comm,tid,pid,cpu,time,event,trace --ns > sched.txt
    scripts/sched_overlay.py tl.json sched.txt --task sum_of --rank 3 --min-us 100

The merged timeline's times are on CLOCK_REALTIME (it says so in "otherData"), perf's
with -k mono on CLOCK_MONOTONIC (this perf refuses -k realtime); the difference of
the two clocks is read now, which holds on the boot that recorded both unless the
wall clock was stepped since (else give --realtime-minus-mono). Ranks are matched to
processes by the "pid N" label of each rank's row."""

import argparse
import collections
import json
import re
import statistics
import sys
import time

SWITCH = re.compile(r"prev_comm=(.*?) prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)")
WAKING = re.compile(r"comm=(.*?) pid=(\d+)")
RECORD = re.compile(r"^\s*(\S.*?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s+(.*)$")


def load_timeline(path):
    with open(path) as f:
        trace = json.load(f)
    other = trace.get("otherData", {})
    if "origin_ns" not in other:
        sys.exit(f"{path}: no otherData.origin_ns (a trace from an older brisk?)")
    pids = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_labels":
            m = re.match(r"pid (\d+)", e["args"].get("labels", ""))
            if m:
                pids[int(m.group(1))] = e["pid"]
    return trace["traceEvents"], other["origin_ns"], other.get("clock", "CLOCK_REALTIME"), pids


def load_sched(path):
    """Switches and wake-ups, in time order, and each thread's process and name."""
    records, process, name = [], {}, {}
    with open(path) as f:
        for line in f:
            m = RECORD.match(line)
            if not m:
                continue
            pid, tid, cpu, t, kind, rest = int(m.group(2)), int(m.group(3)), int(m.group(4)), float(m.group(5)), m.group(6), m.group(7)
            process[tid] = pid
            if kind == "sched_switch":
                s = SWITCH.match(rest)
                if not s:
                    continue
                prev, nxt = int(s.group(2)), int(s.group(5))
                name[prev], name[nxt] = s.group(1), s.group(4)
                records.append((t, cpu, prev, s.group(3), nxt))
            elif kind in ("sched_waking", "sched_wakeup"):
                s = WAKING.match(rest)
                if s:
                    records.append((t, None, int(s.group(2)), None, None))
    records.sort(key=lambda r: r[0])
    if not records:
        sys.exit(f"{path}: no sched_switch records (perf script -F comm,tid,pid,cpu,time,event,trace --ns)")
    return records, process, name


def occupancy(records, t0, t1):
    """Per thread, seconds on a core and seconds runnable off it, and per CPU, seconds
    idle, within [t0, t1]."""
    ran, waited, idle = collections.defaultdict(float), collections.defaultdict(float), collections.defaultdict(float)
    on_cpu, runnable = {}, {}
    for t, cpu, a, state, b in records:
        if t > t1:
            break
        if cpu is None:  # a wake-up: runnable from now
            runnable.setdefault(a, t)
            continue
        if cpu in on_cpu and t >= t0:
            who, since = on_cpu[cpu]
            ran[who] += t - max(since, t0)
            if who == 0:
                idle[cpu] += t - max(since, t0)
        on_cpu[cpu] = (b, t)
        if state.startswith("R"):
            runnable[a] = t  # preempted: still runnable
        else:
            runnable.pop(a, None)
        since = runnable.pop(b, None)
        if since is not None and t >= t0:
            waited[b] += t - max(since, t0)
    for cpu, (who, since) in on_cpu.items():
        ran[who] += t1 - max(since, t0)
        idle[cpu] += t1 - max(since, t0) if who == 0 else 0.0
    for who, since in runnable.items():
        waited[who] += t1 - max(since, t0)
    ran.pop(0, None)  # the idle task: counted per CPU
    waited.pop(0, None)
    return ran, waited, idle


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("timeline", help="brisk's merged Chrome trace (--brisk-timeline or brisk::timeline)")
    ap.add_argument("sched", help="perf script output of a perf sched record -k mono")
    ap.add_argument("--task", required=True, help="the tasks' name in the timeline")
    ap.add_argument("--rank", type=int, help="only tasks that ran on this rank")
    ap.add_argument("--min-us", type=float, default=0.0, help="only tasks that ran at least this long")
    ap.add_argument("--max-us", type=float, default=float("inf"), help="only tasks that ran at most this long")
    ap.add_argument("--realtime-minus-mono", type=int, help="ns; read from the clocks now by default")
    ap.add_argument("--threads", type=int, default=8, help="threads listed per task (the busiest)")
    args = ap.parse_args()

    events, origin, clock, rank_of_pid = load_timeline(args.timeline)
    if clock == "CLOCK_MONOTONIC":
        shift = 0
    elif args.realtime_minus_mono is not None:
        shift = args.realtime_minus_mono
    else:
        shift = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    to_mono = lambda ts_us: (origin + ts_us * 1000.0 - shift) / 1e9
    records, process, name = load_sched(args.sched)

    def label(tid):
        rank = rank_of_pid.get(process.get(tid))
        n = name.get(tid, "?")
        return f"r{rank}:{n.removeprefix('brisk-')}" if rank is not None else n

    submitted, got = {}, {}
    for e in events:
        if e.get("ph") == "i" and e["name"].startswith("submit"):
            submitted[e["args"]["task"]] = e["ts"]
        elif e.get("ph") == "i" and e["name"] == "get":
            got.setdefault(e["args"]["task"], e["ts"])
    tasks = sorted((e for e in events if e.get("ph") == "X" and e["name"] == args.task
                    and (args.rank is None or e["pid"] == args.rank) and args.min_us <= e["dur"] <= args.max_us),
                   key=lambda e: e["ts"])
    if not tasks:
        sys.exit(f"no task named {args.task!r} matches")
    there, back = [], []
    for e in tasks:
        task = e["args"]["task"]
        start = submitted.get(task, e["ts"])
        end = got.get(task, e["ts"] + e["dur"])
        there.append(e["ts"] - start)
        back.append(end - e["ts"] - e["dur"])
        ran, waited, idle = occupancy(records, to_mono(start), to_mono(end))
        busiest = sorted(set(ran) | set(waited), key=lambda k: -(ran.get(k, 0) + waited.get(k, 0)))[: args.threads]
        print(f"rank {e['pid']} {args.task} at {e['ts']:.1f} us: to start {there[-1]:.1f}, ran {e['dur']:.1f}, "
              f"back {back[-1]:.1f} us")
        print("   " + "  ".join(f"{label(k)} ran {ran.get(k, 0) * 1e6:.0f}/waited {waited.get(k, 0) * 1e6:.0f}"
                                for k in busiest))
        print("   idle: " + ", ".join(f"cpu{c} {idle[c] * 1e6:.0f}" for c in sorted(idle)))
    durs = [e["dur"] for e in tasks]
    print(f"{len(tasks)} tasks, medians: to start {statistics.median(there):.1f}, ran {statistics.median(durs):.1f}, "
          f"back {statistics.median(back):.1f} us")


if __name__ == "__main__":
    main()
