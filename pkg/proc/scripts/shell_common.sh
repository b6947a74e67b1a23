# shellcheck shell=bash
# The helpers of the shell session scripts, which start with this file: alive reports whether
# the shell $sp, started at $sst (its start time in clock ticks), still runs. The fields of
# /proc/PID/stat after the command name (which may hold spaces) are split into words.
# shellcheck disable=SC2154,SC2086 # sp and sst come from the script this one starts
alive() {
	local l; [ -n "$sp" ] || return 1
	{ read -r l <"/proc/$sp/stat"; } 2>/dev/null || return 1
	l=${l##*) }; set -f; set -- $l; set +f
	[ "$1" != Z ] && [ "$1" != X ] && [ "${20}" = "$sst" ]
}
