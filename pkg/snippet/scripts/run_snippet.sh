# shellcheck shell=bash
# A snippet run (snippet.go, Run), run as: bash -c SCRIPT sbx-run DIR FILE TOOL MAIN COMMAND. Saves
# the snippet arriving on stdin as DIR/FILE (DIR a new directory under RunDir), runs COMMAND (a
# shell fragment using $d, $f and $m, MAIN being Java's main class) and removes DIR. Streaming
# the code through cat means it never passes through a shell's quoting. Stderr starts with
# "sbx-run: missing TOOL DIR" and the exit status is 127 when TOOL is not on PATH; 125 when the
# code cannot be saved; otherwise the exit status is COMMAND's.
# shellcheck disable=SC2034 # m is for the command run by eval
d=$1 f=$1/$2 tool=$3 m=$4 run=$5
if ! type -P -- "$tool" >/dev/null 2>&1; then echo "sbx-run: missing $tool $d" >&2; exit 127; fi
mkdir -m 1777 "${d%/*}" 2>/dev/null
if ! { mkdir -m 0700 -- "$d" && cat >"$f"; }; then echo "sbx-run: cannot save the code in $d" >&2; exit 125; fi
eval "$run"; rc=$?
rm -rf -- "$d"
exit "$rc"
