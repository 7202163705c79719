#!/usr/bin/env bash
# expect.sh EXIT_CODES REGEX -- command...
# Runs the command; passes when it exits with one of EXIT_CODES (a code, or several
# separated by commas: "0,1") and its output matches REGEX (several, separated by
# '&&&', must each match some line). There is no "any": a test names the codes it
# accepts, so that a program that printed what was wanted and then crashed fails.
set -u
want=$1; regex=$2; shift 3
if [[ ! $want =~ ^[0-9]+(,[0-9]+)*$ ]]; then
  echo "expect.sh: EXIT_CODES must be a code or codes separated by commas, not '$want'"
  exit 2
fi
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
if [[ ",$want," != *",$rc,"* ]]; then echo "expect.sh: exit code $rc, wanted $want"; exit 1; fi
# Several regexes separated by '&&&' must each match some line.
IFS=$'\n' read -r -d '' -a parts < <(printf '%s' "$regex" | sed 's/&&&/\n/g'; printf '\0')
for part in "${parts[@]}"; do
  if ! grep -Eq -- "$part" <<<"$out"; then echo "expect.sh: output does not match /$part/"; exit 1; fi
done
echo "expect.sh: ok"
