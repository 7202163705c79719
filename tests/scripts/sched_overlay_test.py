#!/usr/bin/env python3
"""scripts/sched_overlay.py on a made-up timeline and perf record: two ranks, one task.

Rank 1's worker runs the task on CPU 0 for the whole window. On CPU 1 rank 0's
progress thread runs until it sleeps at 40 us; rank 1's progress thread, woken at
20 us, gets the core only at 50 us, after 10 us of idle; rank 0's, woken at 45 us,
takes it back at 100 us."""

import json
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "sched_overlay.py")
SHIFT = 900 * 10**9  # CLOCK_REALTIME - CLOCK_MONOTONIC, ns
ORIGIN = 1000 * 10**9  # the trace's origin on CLOCK_REALTIME: 100 s on CLOCK_MONOTONIC


def switch(t, cpu, prev, prev_pid, prev_comm, state, nxt, nxt_comm):
    return (f"{prev_comm:>16} {prev_pid:6d}/{prev:<6d} [{cpu:03d}] {t:.9f}: sched:sched_switch: prev_comm={prev_comm} "
            f"prev_pid={prev} prev_prio=120 prev_state={state} ==> next_comm={nxt_comm} next_pid={nxt} next_prio=120")


def main():
    trace = {"displayTimeUnit": "ns", "otherData": {"clock": "CLOCK_REALTIME", "origin_ns": ORIGIN}, "traceEvents": [
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "pid 100"}},
        {"ph": "M", "name": "process_labels", "pid": 1, "tid": 0, "args": {"labels": "pid 200"}},
        {"ph": "i", "s": "t", "pid": 0, "tid": 0, "ts": 0.0, "name": "submit work", "args": {"task": "a"}},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 10.0, "dur": 100.0, "name": "work", "args": {"task": "a"}},
        {"ph": "i", "s": "t", "pid": 0, "tid": 0, "ts": 130.0, "name": "get", "args": {"task": "a"}},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 500.0, "dur": 5.0, "name": "other", "args": {"task": "b"}},
    ]}
    t = lambda us: 100.0 + us * 1e-6
    lines = [
        switch(t(-10), 0, 0, 0, "swapper/0", "R", 201, "brisk-worker0"),
        switch(t(-10), 1, 0, 0, "swapper/1", "R", 101, "brisk-progress"),
        f"  brisk-progress    100/101    [001] {t(20):.9f}: sched:sched_waking: comm=brisk-progress pid=202 prio=120 target_cpu=001",
        switch(t(40), 1, 101, 100, "brisk-progress", "S", 0, "swapper/1"),
        f"  brisk-worker0    200/201    [000] {t(45):.9f}: sched:sched_waking: comm=brisk-progress pid=101 prio=120 target_cpu=001",
        switch(t(50), 1, 0, 0, "swapper/1", "R", 202, "brisk-progress"),
        switch(t(100), 1, 202, 200, "brisk-progress", "S", 101, "brisk-progress"),
        switch(t(1000), 0, 201, 200, "brisk-worker0", "S", 0, "swapper/0"),
    ]
    with tempfile.TemporaryDirectory() as d:
        tl, sched = os.path.join(d, "tl.json"), os.path.join(d, "sched.txt")
        with open(tl, "w") as f:
            json.dump(trace, f)
        with open(sched, "w") as f:
            f.write("\n".join(lines) + "\n")
        out = subprocess.run([sys.executable, SCRIPT, tl, sched, "--task", "work", "--realtime-minus-mono", str(SHIFT)],
                             capture_output=True, text=True, check=True).stdout
        bad = subprocess.run([sys.executable, SCRIPT, tl, sched, "--task", "none", "--realtime-minus-mono", str(SHIFT)],
                             capture_output=True, text=True)
    expected = [
        "rank 1 work at 10.0 us: to start 10.0, ran 100.0, back 20.0 us",
        "r1:worker0 ran 130/waited 0",
        "r0:progress ran 70/waited 55",
        "r1:progress ran 50/waited 30",
        "idle: cpu0 0, cpu1 10",
        "1 tasks, medians: to start 10.0, ran 100.0, back 20.0 us",
    ]
    missing = [e for e in expected if e not in out]
    if missing or bad.returncode == 0 or "no task named 'none'" not in bad.stderr:
        print(out, bad.stderr, "missing:", missing, sep="\n")
        return 1
    print("sched_overlay: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
