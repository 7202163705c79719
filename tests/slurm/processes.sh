# processes.sh — sourced by local_cluster.sh and stop_cluster.sh.

# Succeeds when process $1 is alive (not a zombie: PID 1 may not reap at once) and
# its command name is $2.
alive_as() {
  local line state
  read -r line 2>/dev/null <"/proc/$1/stat" || return 1
  [[ $line == "$1 ($2) "* ]] || return 1
  state=${line#"$1 ($2) "}
  [[ ${state:0:1} != [ZX] ]]
}
