#!/usr/bin/env python3
"""benchmarks/distributed/floors.py on made-up benchmark output: which figures meet
their floors, the exit status, and the errors for bad input."""

import json
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "distributed",
                      "floors.py")
MIB = 1 << 20


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def expect(cond, what, out=""):
    if not cond:
        print(f"floors_test: {what}\n{out}")
        sys.exit(1)


def write(d, name, lines):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        for line in lines:
            f.write(line if isinstance(line, str) else json.dumps(line))
            f.write("\n")
    return path


def transfer(size, ratio, path="pulled"):
    return {"benchmark": "object_transfer", "transport": "ucx", "ranks": 4, "object": "std::vector<uint8_t>",
            "bytes": size, "path": path, "ratio_like_for_like": ratio}


def main():
    with tempfile.TemporaryDirectory() as d:
        good = write(d, "good.json", [
            "mpirun noise that is not JSON",
            {"benchmark": "remote_e2e", "transport": "ucx", "ranks": 4, "median": 4.8},
            transfer(64 * 1024, 0.1, "inline"),  # below 1 MiB: no floor
            transfer(MIB, 0.92),
            transfer(256 * MIB, 0.70),  # at the floor meets it
            {"benchmark": "throughput", "transport": "ucx", "ranks": 4, "submitter": "driver", "tasks_per_s": 238065},
            {"benchmark": "spill", "transport": "ucx", "ranks": 4, "efficiency": 0.935},
            {"benchmark": "template_install", "ranks": 4, "controller_us_per_task": 1.6, "worker_us_per_command_max": 0.65},
            {"benchmark": "template_instantiate", "ranks": 4, "controller_tasks_per_s": 72.7e6,
             "end_to_end_tasks_per_s": 3.0e6},
            {"benchmark": "template_edit", "ranks": 4, "controller_us_per_edit": 3.57,
             "worker_us_per_edited_command_max": 0.2, "worker_us_per_edit_message_max": 0.6},
            {"benchmark": "template_edit_each_sent", "ranks": 4, "controller_us_per_edit": 2.1,
             "worker_us_per_edited_command_max": 0.5, "worker_us_per_edit_max": 1.5},
            {"name": "physbam_compare", "variant": "brisk", "ranks": 4, "ratio_of_medians": 1.002,
             "paired_ratio_median": 1.041},
            {"name": "physbam_compare", "variant": "brisk_untemplated", "ranks": 4, "ratio_of_medians": 1.106,
             "paired_ratio_median": 1.1},
        ])
        rc, out, err = run(good)
        expect(rc == 0, f"all met: exit status {rc}, wanted 0; stderr {err}", out)
        expect("floors: 12 met, 0 missed" in out, "all met: wrong count", out)
        expect("met     remote e2e, median: 4.800 us (floor <= 20)" in out, "remote e2e line", out)
        expect("pulled, 256 MiB: 0.700 of raw (floor >= 0.7)" in out, "a ratio at the floor meets it", out)
        expect("64 KiB" not in out and "65536" not in out, "an object under 1 MiB has no floor", out)
        expect("--      throughput, submitted by driver: 238,065 tasks/s" in out, "throughput is reported", out)
        expect("--      physbam_like brisk_untemplated" in out, "untemplated physbam is reported, not judged", out)
        expect("template instantiate, controller: 72,700,000 tasks/s (floor >= 5,000,000)" in out, "instantiate", out)
        expect(f"{good} (ucx, 4 ranks)" in out, "the file's transports and ranks", out)

        missed = write(d, "missed.json", [
            {"benchmark": "remote_e2e", "transport": "mpi", "ranks": 4, "median": 42.4},
            transfer(MIB, 0.601),
            transfer(16 * MIB, 0.96),
            {"benchmark": "template_edit", "ranks": 4, "controller_us_per_edit": 12.0,
             "worker_us_per_edited_command_max": 1.0},  # an older line: no time per message
            {"benchmark": "template_edit_each_sent", "ranks": 4, "controller_us_per_edit": 1.2,
             "worker_us_per_edited_command_max": 29.6, "worker_us_per_edit_max": 88.9},
            {"name": "physbam_compare", "variant": "brisk", "ranks": 2, "ratio_of_medians": 1.054,
             "paired_ratio_median": 1.047},
        ])
        rc, out, err = run(missed, good)
        expect(rc == 1, f"a figure missed: exit status {rc}, wanted 1", out)
        expect("floors: 14 met, 5 missed" in out, "missed: wrong count", out)
        expect("MISSED  remote e2e, median: 42.4 us (floor <= 20)" in out, "missed e2e", out)
        expect("MISSED  object transfer, std::vector<uint8_t>, pulled, 1 MiB: 0.601 of raw" in out, "missed transfer", out)
        expect("MISSED  template edit, controller: 12.0 us (floor <= 10)" in out, "missed edit", out)
        expect("MISSED  template edit sent on its own, worker, per message: 88.9 us (floor <= 10)" in out,
               "missed edit at a rank", out)
        expect("--      template edit sent on its own, worker, per edited command: 29.6 us" in out,
               "the time per edited command is reported", out)
        expect("MISSED  physbam_like brisk vs MPI, ratio of medians (paired 1.047): 1.054" in out, "missed physbam", out)

        rc, out, _ = run("--missed-only", good, missed)
        expect(rc == 1, "--missed-only keeps the exit status", out)
        expect("met   " not in out and "--      " not in out, "--missed-only prints only missed figures", out)
        expect(good not in out, "--missed-only leaves out a file whose figures all met", out)
        expect(out.count("MISSED") == 5, "--missed-only prints every missed figure", out)

        null = write(d, "null.json", [transfer(MIB, None), {"benchmark": "remote_e2e", "median": 3.0}])
        rc, out, _ = run(null)
        expect(rc == 1, f"a null figure: exit status {rc}, wanted 1", out)
        expect("NONE    object transfer, std::vector<uint8_t>, pulled, 1 MiB: no figure (null in the output)" in out,
               "a null figure is listed", out)
        expect("floors: 1 met, 0 missed, 1 without a figure" in out, "a null figure is counted", out)

        empty = write(d, "empty.json", ["no JSON here"])
        rc, out, _ = run(empty)
        expect(rc == 0 and "(no figures with a floor)" in out and "floors: 0 met, 0 missed" in out,
               "a file without figures is named", out)

        for name, lines, message in [
            ("truncated.json", ['{"benchmark":"remote_e2e",'], "truncated.json:1: not a JSON line"),
            ("text.json", [{"benchmark": "remote_e2e", "median": "fast"}], "text.json:1: 'median' is 'fast', not a number"),
            ("nokey.json", ["", {"benchmark": "spill", "ranks": 2}], "nokey.json:2: a 'spill' line has no 'efficiency'"),
            ("array.json", ["[1, 2]"], None),  # not an object, but not starting with '{': skipped
            ("list.json", ['{"benchmark": "spill", "efficiency": true}'], "list.json:1: 'efficiency' is True, not a number"),
            ("nan.json", ['{"benchmark": "remote_e2e", "median": NaN}'], "nan.json:1: not a JSON line (NaN is not JSON"),
            ("inf.json", ['{"benchmark": "spill", "efficiency": -Infinity}'], "inf.json:1: not a JSON line (-Infinity"),
        ]:
            path = write(d, name, lines)
            rc, out, err = run(good, path)
            if message is None:
                expect(rc == 0, f"{name}: exit status {rc}, wanted 0", out + err)
                continue
            expect(rc == 2, f"{name}: exit status {rc}, wanted 2", out + err)
            expect(message in err, f"{name}: stderr lacks '{message}'", err)
            expect(out == "", f"{name}: nothing is printed before the error", out)
        rc, _, err = run(os.path.join(d, "absent.json"))
        expect(rc == 2 and "absent.json: No such file or directory" in err, "a missing file", err)
    print("floors_test: ok")


if __name__ == "__main__":
    main()
