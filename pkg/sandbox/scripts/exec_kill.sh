# shellcheck shell=bash
# The end of a command past its end (exec.go, killCommand), run as: bash -c SCRIPT sbx-kill PID
# START AGENT. Ends what belongs to the command PID, a pid in the sandbox, if it is still the
# process that started at START (field 22 of /proc/PID/stat, the same in every pid namespace):
# the process, its group and its session (their IDs are the command's pid, which cannot be reused
# while any of them lives) and their descendants by parent links. It stops them, looks again
# until nothing new shows up (a stopped process cannot fork), then kills them all. First it sends
# CONT to AGENT when it is not 0 (an agent something stopped). It forks nothing: a fork bomb may
# hold every pid. Exits 3 when the command is gone, else 0.
p=$1 st=$2 ag=$3
[ "$ag" -gt 0 ] && kill -CONT "$ag" 2>/dev/null
declare -A pp pg sd ss hit
scan() {
	local d q l
	pp=() pg=() sd=() ss=()
	for d in /proc/[0-9]*; do
		q=${d#/proc/}
		{ read -r l <"$d/stat"; } 2>/dev/null || continue
		l=${l##*) }; set -f
		# shellcheck disable=SC2086 # split into fields on purpose, with globbing off
		set -- $l
		set +f
		pp[$q]=$2 pg[$q]=$3 sd[$q]=$4 ss[$q]=${20}
	done
	[ "${ss[$p]}" = "$st" ] || mine=0
}
mine=1; scan
[ "$mine" = 1 ] || exit 3
n=0
while [ "$n" -lt 16 ]; do
	new=0
	for q in "${!pp[@]}"; do
		[ "$q" = $$ ] || [ "$q" = 1 ] || [ "$q" = "$ag" ] && continue
		[ "${hit[$q]}" = "${ss[$q]}" ] && continue
		if { [ "$mine" = 1 ] && { [ "$q" = "$p" ] || [ "${pg[$q]}" = "$p" ] || [ "${sd[$q]}" = "$p" ]; }; } || [ -n "${hit[${pp[$q]}]}" ]; then
			hit[$q]=${ss[$q]}; kill -STOP "$q" 2>/dev/null; new=1
		fi
	done
	[ "$new" = 0 ] && break
	scan; n=$((n+1))
done
for q in "${!hit[@]}"; do kill -KILL "$q" 2>/dev/null; done
exit 0
