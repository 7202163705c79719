# shellcheck shell=bash
# restart_lib.sh — sourced by the restart scripts of tests/fault after they define
# run (the job, its output on stdout) and fail (prints why, exits 1).

# The status of a job whose rank SIGKILLed itself: mpirun's for a rank killed by
# signal 9 (128 + 9); not timeout's 124, nor a clean or an error exit.
# shellcheck disable=SC2034
killed_status=137

# killed_run LOG ARGS...: `run ARGS...`, which must die by SIGKILL; its output in LOG.
killed_run() {
  local log=$1 rc=0
  shift
  run "$@" > "$log" || rc=$?
  [ "$rc" -eq "$killed_status" ] || fail "the killed run ($*) exited with $rc, wanted $killed_status: $(cat "$log")"
}
