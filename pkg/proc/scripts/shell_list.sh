# shellcheck shell=bash
# The shell sessions under directory $1 (see shell.go), after shell_common.sh: one
# tab-separated line each with the name, state (idle, busy, exited), shell PID, start
# ($EPOCHREALTIME), last use (seconds) and working directory. The sandbox can write anything
# there, so only directories named as sbx names sessions count, the shell's record is read
# as one line of at most 64 bytes from a regular file, and tabs and newlines in the
# directory become spaces.
export LC_ALL=C
for d in "$1"/*/; do
	d=${d%/} n=${d##*/}
	case $n in '' | *[!A-Za-z0-9_-]*) continue ;; esac
	[ "${#n}" -le 64 ] || continue
	[ -f "$d/pid" ] || continue
	sp='' sst='' sep=''
	# shellcheck disable=SC2034 # alive reads sst
	read -r -n 64 sp sst sep _ 2>/dev/null <"$d/pid"
	state=exited cwd=''
	if alive; then
		state=idle; flock -n "$d/lock" true 2>/dev/null || state=busy
		cwd=$(readlink "/proc/$sp/cwd" 2>/dev/null)
	fi
	last=$(date -r "$d/last" +%s 2>/dev/null) # not stat, which fails under gVisor 20221219
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$state" "$sp" "$sep" "$last" "${cwd//[$'\t\n']/ }"
done
exit 0
