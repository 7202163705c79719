#!/usr/bin/env bash
# expect.sh EXIT_CODE REGEX -- command...
# Runs the command; passes when it exits with EXIT_CODE (or any code, for "any")
# and its output matches REGEX (several, separated by '&&&', must all match).
set -u
want_rc=$1; regex=$2; shift 3
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
if [ "$want_rc" != any ] && [ "$rc" -ne "$want_rc" ]; then echo "expect.sh: exit code $rc, wanted $want_rc"; exit 1; fi
# Several regexes separated by '&&&' must each match some line.
IFS=$'\n' read -r -d '' -a parts < <(printf '%s' "$regex" | sed 's/&&&/\n/g'; printf '\0')
for part in "${parts[@]}"; do
  if ! grep -Eq -- "$part" <<<"$out"; then echo "expect.sh: output does not match /$part/"; exit 1; fi
done
echo "expect.sh: ok"
