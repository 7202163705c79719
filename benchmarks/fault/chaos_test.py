#!/usr/bin/env python3
"""Tests of benchmarks/fault/chaos.py against a fake launcher and a fake program.

The fake program stands for brisk_chaos without MPI: its "ranks" are child processes
(rank 0 is itself), it prints the start line with their pids, watches them, says on
stderr that a rank was lost as the runtime does, and prints a result line that
CHAOS_FAKE decides: ok, wrong (another digest after a fault), lost, hang (never
ends), fail (no result, exit 1), badexit (the right result, exit 3 after a
fault). Each case checks the runner's class for the run,
its exit status, and that no rank process is left, stopped or not.
"""
import json
import os
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "chaos.py")

FAKE_PROGRAM = r'''#!/usr/bin/env python3
import json, os, signal, subprocess, sys, time
mode = os.environ["CHAOS_FAKE"]
np = int(os.environ["CHAOS_FAKE_NP"])
seed = int([a for a in sys.argv if a.startswith("--seed=")][0].split("=")[1])
kids = [subprocess.Popen(["sleep", "60"]) for _ in range(np - 1)]
with open(os.environ["CHAOS_FAKE_PIDS"], "a") as f:
    f.write(" ".join(str(k.pid) for k in kids) + "\n")
print(json.dumps({"chaos": "start", "seed": seed, "np": np, "pids": [os.getpid()] + [k.pid for k in kids]}), flush=True)
def state(k):
    if k.poll() is not None:
        return "dead"
    with open(f"/proc/{k.pid}/stat") as f:
        return "stopped" if f.read().rsplit(")", 1)[1].split()[0] == "T" else "alive"
lost = set()
t0 = time.monotonic()
while time.monotonic() - t0 < 1.0 or (mode == "hang"):
    for r, k in enumerate(kids, 1):
        if r not in lost and state(k) != "alive":
            lost.add(r)
            print(f"brisk: rank 0: rank {r} was lost: fake", file=sys.stderr, flush=True)
    time.sleep(0.01)
if mode == "fail":
    for k in kids:
        k.kill()
    sys.exit(1)
faulted = bool(lost)
result = {"chaos": "result", "seed": seed, "np": np, "digest": "aa", "expect": "aa", "ok": True, "lost": 0,
          "errors": 0, "corrupt": 0, "steps": [{"kind": "graph", "digest": "aa", "expect": "aa"}], "rollbacks": 0,
          "seconds": 1.0 + 0.5 * faulted, "lost_ranks": sorted(lost), "tasks_replayed": 3 * faulted,
          "objects_rebuilt": faulted, "objects_restored": 0, "actors_moved": 0, "runs": 10}
if faulted and mode == "wrong":
    result["digest"] = result["steps"][0]["digest"] = "bb"
if faulted and mode == "lost":
    result["lost"] = 1
print(json.dumps(result), flush=True)
for k in kids:  # the survivors leave; a stopped rank cannot
    if state(k) == "alive":
        k.kill()
        k.wait()
if faulted and mode == "badexit":  # the right result, but the job's status is a failure
    sys.exit(3)
'''

FAKE_LAUNCH = r'''#!/usr/bin/env bash
# fake brisk-launch: checks the options the runner must pass, then runs the program
np=""
while [ "$1" != "--" ]; do
  case $1 in --np=*) np=${1#--np=} ;; --keep-going|--transport=ucx) ;; *) echo "fake launch: unexpected $1" >&2; exit 9 ;; esac
  shift
done
shift
export CHAOS_FAKE_NP=$np
exec "$@"
'''

failures = 0


def check(ok, what):
    global failures
    print(("ok: " if ok else "FAILED: ") + what, flush=True)
    if not ok:
        failures += 1


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run(tmp, mode, *args):
    pids_file = os.path.join(tmp, f"pids-{mode}")
    env = dict(os.environ, CHAOS_FAKE=mode, CHAOS_FAKE_PIDS=pids_file)
    p = subprocess.run([sys.executable, RUNNER, "--launch", os.path.join(tmp, "launch"), "--program",
                        os.path.join(tmp, "program"), *args], env=env, capture_output=True, text=True, timeout=100)
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    time.sleep(0.2)
    pids = open(pids_file).read().split() if os.path.exists(pids_file) else []
    left = [pid for pid in pids if alive(int(pid))]
    return p, lines, left


def main():
    with tempfile.TemporaryDirectory() as tmp:
        write(os.path.join(tmp, "program"), FAKE_PROGRAM)
        write(os.path.join(tmp, "launch"), FAKE_LAUNCH)

        # Seeds 1-4 at np 3 draw both signals (runner seed 0).
        p, lines, left = run(tmp, "ok", "--seeds", "1-4", "--np", "3", "--timeout", "20")
        faults = [l for l in lines if l.get("kind") == "fault"]
        check(p.returncode == 0, f"ok: exit status 0 ({p.returncode}; {p.stderr[-400:]})")
        check(len(faults) == 4 and all(l["class"] == "ok" for l in faults), "ok: four fault runs, all ok")
        check(all(l["delivered"] and l["deaths"] == 1 and l["detected_s"] is not None for l in faults),
              "ok: every fault delivered, its death seen")
        check(all(1 <= l["victim"] <= 2 for l in faults), "ok: the victim is never rank 0")
        check({l["signal"] for l in faults} == {"KILL", "STOP"}, f"ok: both signals drawn ({[l['signal'] for l in faults]})")
        check(all(abs(l["recovery_s"] - 0.5) < 1e-6 for l in faults), "ok: recovery = fault run minus fault-free run")
        s = lines[-1]
        check(s.get("summary") and s["runs"] == 4 and s["ok"] == 8 and s["deaths"] == 4 and s["replays"] == 16,
              f"ok: the summary counts runs, deaths and replays ({s})")
        check(not left, f"ok: no rank process left, stopped ones included ({left})")

        for mode, cls in (("wrong", "wrong"), ("lost", "lost"), ("fail", "failed"), ("badexit", "failed")):
            p, lines, left = run(tmp, mode, "--seeds", "1", "--np", "3", "--timeout", "20")
            got = [l["class"] for l in lines if "class" in l]
            want = ["failed"] if mode == "fail" else ["ok", cls]
            check(p.returncode == 1 and got == want, f"{mode}: classes {got}, exit status {p.returncode}")
            check(not left, f"{mode}: no rank process left ({left})")

        p, lines, left = run(tmp, "hang", "--seeds", "1", "--np", "3", "--timeout", "3", "--no-fault")
        check(p.returncode == 1 and [l.get("class") for l in lines[:1]] == ["hung"], f"hang: {lines[:1]}")
        check(not left, f"hang: every rank killed at the timeout ({left})")

        for args, word in ((["--np", "1"], "--np"), (["--seeds", "3-1"], "--seeds"), (["--signals", "term"], "--signals"),
                           (["--bogus"], "--bogus"), (["--timeout", "0"], "--timeout")):
            p = subprocess.run([sys.executable, RUNNER, "--launch", os.path.join(tmp, "launch"), "--program",
                                os.path.join(tmp, "program"), *args], capture_output=True, text=True, timeout=30)
            check(p.returncode == 2 and word in p.stderr, f"usage {args}: exit 2 naming {word} ({p.returncode}: {p.stderr.strip()})")
    print("chaos runner test " + ("OK" if failures == 0 else "FAILED"))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
