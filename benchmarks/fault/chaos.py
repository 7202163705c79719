#!/usr/bin/env python3
"""Chaos runs: random jobs (brisk_chaos) with a rank killed or stopped mid-run, counted.

    benchmarks/fault/chaos.py --seeds 1-50 --np 3,4 [--build build] [--timeout 240]

For each rank count and seed: a fault-free run of build/benchmarks/fault/brisk_chaos
--seed=S gives the reference digest and duration; then a run of the same seed with a
fault: a victim drawn among ranks 1..np-1 (never rank 0, the driver's), a moment drawn
in [5 %, 80 %] of the reference run's duration after the program's start line, and
SIGKILL or SIGSTOP. The runner delivers the signal itself, to the pid that the program
printed for that rank at its start: BRISK_FAULT_INJECT can only SIGKILL, and from the
rank's own start (MPI and UCX set-up included, which vary more than the job), while a
stopped rank is what a hung node looks like, and the runner must kill it at the end
anyway (a stopped process cannot leave by itself). So the ranks must run on this
machine (mpirun, not srun across nodes). A moment that comes after the run's result
line (a fault run can be faster than its reference) delivers nothing: the run counts,
its fault does not ("delivered": false). The victim, moment and signal derive from
(seed, np, --runner-seed): a run can be repeated exactly with --seeds S --np N.

Each run is classified: ok; wrong (a digest that differs from the fault-free run's or
from the one the program computed without brisk, or a corrupt large value); lost (an
ObjectLostError or a rank-lost error reached the driver); failed (no result line, a
task error, or a non-zero exit status: brisk-launch --keep-going gives the job's); hung (the
run passed --timeout, or its survivors did not leave after the result). One JSON line
per run, then a summary line. Exit status 1 when any run is not ok, 2 on bad usage.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}
LOST_LINE = re.compile(r"brisk: rank (\d+): rank (\d+) was lost")
DECLARED_LINE = re.compile(r"brisk: rank (\d+): the job declared this rank dead")
ROLLBACK_LINE = re.compile(r"rank (\d+) was lost while the job used data objects")


class UsageError(Exception):
    pass


def parse_ranges(text, option):
    """'1-5,9' -> [1, 2, 3, 4, 5, 9]; UsageError naming the option otherwise."""
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise UsageError(f"invalid value '{text}' for {option}: expected numbers and ranges, e.g. 1-50 or 3,4")
        lo = int(m.group(1))
        out.extend(range(lo, int(m.group(2) or lo) + 1))
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1-3", help="seeds, e.g. 1-50 or 4,7,9 (default 1-3)")
    p.add_argument("--np", default="3", help="rank counts, e.g. 3,4 (default 3); at least 2")
    p.add_argument("--signals", default="kill,stop", help="faults to draw from: kill, stop (default both)")
    p.add_argument("--build", default=os.path.join(REPO, "build"), help="the build folder (default ./build)")
    p.add_argument("--program", help="brisk_chaos (default BUILD/benchmarks/fault/brisk_chaos)")
    p.add_argument("--launch", default=os.path.join(REPO, "slurm", "brisk-launch"), help="the launcher")
    p.add_argument("--timeout", type=float, default=240, help="seconds per run before it counts as hung (default 240)")
    p.add_argument("--failure-timeout-ms", type=int, default=2000,
                   help="--brisk-failure-timeout-ms for the runs (default 2000)")
    p.add_argument("--runner-seed", type=int, default=0, help="varies the victims, moments and signals (default 0)")
    p.add_argument("--no-fault", action="store_true", help="fault-free runs only (the references)")
    p.add_argument("--no-stacks", dest="stacks", action="store_false",
                   help="do not keep the ranks' stacks (gdb) in the log of a hung run")
    p.add_argument("--logs", help="keep every run's output in this folder (default: only failing runs' tails, on stderr)")
    p.add_argument("--out", help="also append the JSON lines to this file")
    p.add_argument("program_args", nargs="*", help="after --: more arguments for brisk_chaos (e.g. --nodes=80)")

    def error(message):  # argparse's own errors name the option; exit 2 with ours
        raise UsageError(message)

    p.error = error
    a = p.parse_args(argv)
    a.seed_list = parse_ranges(a.seeds, "--seeds")
    a.np_list = parse_ranges(a.np, "--np")
    if min(a.np_list) < 2:
        raise UsageError(f"invalid value '{a.np}' for --np: a fault needs at least 2 ranks (rank 0 is never the victim)")
    a.signal_list = [s.strip() for s in a.signals.split(",")]
    for s in a.signal_list:
        if s not in SIGNALS:
            raise UsageError(f"invalid value '{a.signals}' for --signals: expected kill, stop or both")
    if a.timeout <= 0:
        raise UsageError(f"invalid value '{a.timeout}' for --timeout: expected a positive number of seconds")
    if a.failure_timeout_ms <= 0:
        raise UsageError(f"invalid value '{a.failure_timeout_ms}' for --failure-timeout-ms: expected a positive number")
    a.program = a.program or os.path.join(a.build, "benchmarks", "fault", "brisk_chaos")
    if not os.access(a.program, os.X_OK):
        raise UsageError(f"--program: '{a.program}' is not an executable file (build the target brisk_chaos)")
    if not os.access(a.launch, os.X_OK):
        raise UsageError(f"--launch: '{a.launch}' is not an executable file")
    return a


def launch_command(a, np, seed, ckpt_dir):
    """The one place a run's command is made (slurm/brisk-launch with --keep-going)."""
    return [a.launch, "--keep-going", f"--np={np}", "--transport=ucx", "--", a.program, f"--seed={seed}",
            "--brisk-idle=sleep", f"--brisk-failure-timeout-ms={a.failure_timeout_ms}",
            f"--brisk-checkpoint-dir={ckpt_dir}", *a.program_args]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by mpirun) is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stopped(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


class Job:
    """One launch: its output lines with their arrival times, read by two threads."""

    def __init__(self, cmd):
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True, errors="replace", bufsize=1, start_new_session=True)
        self.lines = []  # (seconds since t0, stream, text)
        self.cond = threading.Condition()
        self.readers = [threading.Thread(target=self._read, args=(s, n), daemon=True)
                        for s, n in ((self.proc.stdout, "out"), (self.proc.stderr, "err"))]
        for r in self.readers:
            r.start()

    def _read(self, stream, name):
        for line in stream:
            with self.cond:
                self.lines.append((time.monotonic() - self.t0, name, line.rstrip("\n")))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def now(self):
        return time.monotonic() - self.t0

    def records(self, kind):
        """Every {"chaos": kind, ...} line, with its time."""
        out = []
        with self.cond:
            for t, stream, text in self.lines:
                if stream == "out" and text.startswith("{") and '"chaos"' in text:
                    try:
                        j = json.loads(text)
                    except ValueError:
                        continue
                    if j.get("chaos") == kind:
                        out.append((j, t))
        return out

    def record(self, kind):
        """The first {"chaos": kind, ...} line and its time, or (None, None)."""
        found = self.records(kind)
        return found[0] if found else (None, None)

    def wait_until(self, pred, deadline):
        """Waits (until `deadline`, seconds since t0) for pred() or the process's end."""
        while True:
            if pred():
                return True
            if self.proc.poll() is not None:
                for r in self.readers:
                    r.join(timeout=5)
                return pred()
            left = deadline - self.now()
            if left <= 0:
                return False
            with self.cond:
                self.cond.wait(timeout=min(left, 0.05))

    def kill_all(self, pids):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def add_stacks(self, pids):
        """Appends each live rank's threads' stacks (gdb), for a run about to be killed."""
        gdb = shutil.which("gdb")
        if not gdb:
            return
        for rank, pid in enumerate(pids):
            if not alive(pid):
                continue
            try:
                out = subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt"], capture_output=True,
                                     text=True, errors="replace", timeout=60, stdin=subprocess.DEVNULL).stdout
            except (subprocess.TimeoutExpired, OSError) as e:
                out = f"gdb failed: {e}"
            with self.cond:
                for line in out.splitlines():
                    self.lines.append((self.now(), f"gdb rank {rank}", line))

    def text(self):
        with self.cond:
            return "\n".join(f"{t:9.3f} {s} {x}" for t, s, x in self.lines)


def run_once(a, np, seed, fault=None):
    """One launch; `fault` = (victim, signal name, moment in seconds after the start
    line) or None. Returns the run's record (a dict) and its output."""
    ckpt = tempfile.mkdtemp(prefix=f"chaos-s{seed}-np{np}-")
    job = Job(launch_command(a, np, seed, ckpt))
    deadline = a.timeout
    rec = {"seed": seed, "np": np}
    pids, hung, why = [], False, ""
    try:
        if not job.wait_until(lambda: job.record("start")[0] is not None, deadline):
            hung = job.proc.poll() is None
            why = "no start line" + (" before the timeout" if hung else "")
        else:
            start, t_start = job.record("start")
            pids = [int(p) for p in start["pids"]]
            rec["start_s"] = round(t_start, 3)
            t_fault = None
            if fault:
                victim, sig, moment = fault
                rec.update(victim=victim, signal=sig.upper(), moment_s=round(moment, 3))
                done = lambda: job.record("result")[0] is not None
                job.wait_until(done, min(deadline, t_start + moment))
                if not done() and job.proc.poll() is None and job.now() < deadline:
                    os.kill(pids[victim], SIGNALS[sig])
                    t_fault = job.now()
                rec["delivered"] = t_fault is not None
            finished = job.wait_until(lambda: job.record("result")[0] is not None, deadline)
            if fault and t_fault is not None and fault[1] == "stop" and finished:
                # The survivors must leave by themselves; then the stopped victim is killed.
                others = [p for r, p in enumerate(pids) if r != fault[0]]
                if not job.wait_until(lambda: not any(alive(p) for p in others), deadline):
                    hung, why = True, "the survivors did not leave after the result"
                rec["victim_left_stopped"] = stopped(pids[fault[0]])
                try:
                    os.kill(pids[fault[0]], signal.SIGKILL)
                except OSError:
                    pass
            if not hung and not job.wait_until(lambda: job.proc.poll() is not None, deadline):
                hung = True
                why = why or ("the job did not end after its result" if finished else "no result before the timeout")
            if t_fault is not None:
                rec["fault_at_s"] = round(t_fault - t_start, 3)
                with job.cond:
                    seen = [(t, int(m.group(1)), int(m.group(2))) for t, s, x in job.lines
                            if (m := LOST_LINE.search(x))]
                    declared = [int(m.group(1)) for t, s, x in job.lines if (m := DECLARED_LINE.search(x))]
                first = [t for t, _, dead in seen if dead == fault[0]]
                rec["detected_s"] = round(min(first) - t_fault, 3) if first else None
                rec["false_deaths"] = sorted({dead for _, _, dead in seen if dead != fault[0]} | set(declared) - {fault[0]})
    finally:
        if job.proc.poll() is None:
            hung = True
            if a.stacks:
                job.add_stacks(pids)
            job.kill_all(pids)
        try:
            job.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            job.kill_all(pids)
        for pid in pids:  # stopped or otherwise left over
            if alive(pid):
                rec.setdefault("leftovers", []).append(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        shutil.rmtree(ckpt, ignore_errors=True)
    # A driver that rolls back after its result line (a loss after its last data
    # call) runs again and prints another: the last one counts, and each is checked.
    results = [j for j, _ in job.records("result")]
    rec["exit_status"] = job.proc.returncode
    rec["hung"] = hung
    rec["why"] = why
    rec["result"] = results[-1] if results else None
    rec["earlier_results"] = results[:-1]
    return rec, job.text()


def classify(rec, reference):
    """ok, wrong, lost, failed or hung, and why."""
    for earlier in rec.get("earlier_results", []):
        cls, why = classify(dict(rec, result=earlier, earlier_results=[]), reference)
        if cls != "ok":
            return cls, "a result line before the last: " + why
    r = rec["result"]
    if rec["hung"]:
        return "hung", rec["why"] or "timeout"
    if r is None:
        return "failed", rec["why"] or "no result line"
    if r.get("lost", 0) > 0:
        return "lost", f"{r['lost']} results lost"
    if r.get("corrupt", 0) > 0:
        return "wrong", f"{r['corrupt']} corrupt large values"
    if r.get("wrong_steps", 0) > 0:
        return "wrong", f"{r['wrong_steps']} of {r.get('steps_checked')} steps ended with another digest than computed without brisk"
    if r["digest"] != r["expect"]:
        bad = [i for i, s in enumerate(r["steps"]) if s["digest"] != s["expect"]]
        return "wrong", f"digest {r['digest']}, computed without brisk {r['expect']} (steps {bad})"
    if reference is not None and reference.get("digest") != r["digest"]:
        return "wrong", f"digest {r['digest']}, fault-free run {reference.get('digest')}"
    if r.get("errors", 0) > 0:
        return "failed", f"{r['errors']} task errors: {r.get('first_error', '')}"
    if rec["exit_status"] != 0:  # brisk-launch --keep-going: the job's status from the ranks' reports
        return "failed", f"exit status {rec['exit_status']}"
    return "ok", ""


def run_line(rec, cls, why, reference, kind):
    r = rec["result"] or {}
    line = {"kind": kind, "seed": rec["seed"], "np": rec["np"]}
    for k in ("victim", "signal", "moment_s", "delivered", "fault_at_s", "detected_s"):
        if k in rec:
            line[k] = rec[k]
    line["duration_s"] = r.get("seconds")
    if reference is not None and r.get("seconds") is not None:
        line["reference_s"] = reference["seconds"]
        line["recovery_s"] = round(r["seconds"] - reference["seconds"], 3)
    if "victim" in rec:
        lost_ranks = r.get("lost_ranks", [])
        line["deaths"] = int(rec.get("delivered", False) and (rec["victim"] in lost_ranks or rec.get("detected_s") is not None))
        line["false_deaths"] = rec.get("false_deaths", [])
    for k in ("rollbacks", "tasks_replayed", "objects_rebuilt", "objects_restored", "actors_moved", "runs"):
        line[k] = r.get(k)
    if reference is not None:
        line["reference_runs"] = reference.get("runs")
    line["exit_status"] = rec["exit_status"]
    if rec.get("leftovers"):
        line["leftovers"] = rec["leftovers"]
    line["class"] = cls
    if why:
        line["why"] = why
    return line


def emit(a, line, stream=sys.stdout):
    text = json.dumps(line)
    print(text, file=stream, flush=True)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")


def keep_log(a, rec, kind, text, cls):
    name = f"chaos-seed{rec['seed']}-np{rec['np']}-r{a.runner_seed}-{kind}.log"
    if a.logs:
        os.makedirs(a.logs, exist_ok=True)
        with open(os.path.join(a.logs, name), "w") as f:
            f.write(text + "\n")
    if cls != "ok":
        tail = "\n".join(l for l in text.splitlines() if " gdb rank " not in l)
        tail = "\n".join(tail.splitlines()[-60:])
        print(f"--- {name} ({cls}), last lines:\n{tail}\n---", file=sys.stderr, flush=True)


def summary(lines):
    faults = [l for l in lines if l["kind"] == "fault"]
    delivered = [l for l in faults if l.get("delivered")]
    rec = [l["recovery_s"] for l in delivered if l.get("recovery_s") is not None]
    det = [l["detected_s"] for l in delivered if l.get("detected_s") is not None]
    count = lambda cls: sum(1 for l in lines if l["class"] == cls)
    total = lambda k: sum(l.get(k) or 0 for l in delivered)
    med = lambda v: round(statistics.median(v), 3) if v else None
    return {
        "summary": True,
        "runs": len(faults),
        "references": sum(1 for l in lines if l["kind"] == "reference"),
        "delivered": len(delivered),
        "by_signal": {s: sum(1 for l in delivered if l["signal"] == s) for s in ("KILL", "STOP")},
        "deaths": total("deaths"),
        "false_deaths": sum(len(l.get("false_deaths") or []) for l in delivered),
        "replays": total("tasks_replayed") + total("objects_rebuilt") + total("objects_restored"),
        "tasks_replayed": total("tasks_replayed"),
        "objects_rebuilt": total("objects_rebuilt"),
        "objects_restored": total("objects_restored"),
        "actors_moved": total("actors_moved"),
        "rollbacks": total("rollbacks"),
        "recovery_s_median": med(rec),
        "recovery_s_max": round(max(rec), 3) if rec else None,
        "detected_s_median": med(det),
        "detected_s_max": round(max(det), 3) if det else None,
        "ok": count("ok"),
        "wrong": count("wrong"),
        "lost": count("lost"),
        "failed": count("failed"),
        "hung": count("hung"),
    }


def main(argv):
    try:
        a = parse_args(argv)
    except UsageError as e:
        print(f"chaos.py: {e}", file=sys.stderr)
        print("chaos.py: run 'chaos.py --help' for usage", file=sys.stderr)
        return 2
    lines = []
    for np in a.np_list:
        for seed in a.seed_list:
            rec, text = run_once(a, np, seed)
            cls, why = classify(rec, None)
            line = run_line(rec, cls, why, None, "reference")
            lines.append(line)
            emit(a, line)
            keep_log(a, rec, "reference", text, cls)
            if cls != "ok" or a.no_fault:
                continue
            reference = rec["result"]
            rng = random.Random(f"{seed}:{np}:{a.runner_seed}")
            victim = rng.randrange(1, np)
            sig = rng.choice(a.signal_list)
            moment = rng.uniform(0.05, 0.8) * reference["seconds"]
            rec, text = run_once(a, np, seed, (victim, sig, moment))
            cls, why = classify(rec, reference)
            line = run_line(rec, cls, why, reference, "fault")
            lines.append(line)
            emit(a, line)
            keep_log(a, rec, "fault", text, cls)
    s = summary(lines)
    emit(a, s)
    return 0 if s["ok"] == len(lines) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
