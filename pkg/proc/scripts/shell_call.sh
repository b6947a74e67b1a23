# shellcheck shell=bash
# One call to a shell session (shell.go, Shell), after shell_common.sh, run as: bash -c SCRIPT
# sbx-sh DIR ID MARKER TIMEOUT LOCKWAIT RESET LEN LINE SYNC INIT SUPERVISOR. DIR is the session's
# directory (see ShellDir), ID the call's, MARKER its random status marker, TIMEOUT in ms (0:
# none), LOCKWAIT in seconds, RESET 1 to start a new shell, LEN the script's length on stdin (-1:
# no script, only make sure there is a shell), LINE the command line that runs it, SYNC the line
# that records an abandoned call's status, INIT a new shell's first line, SUPERVISOR
# shell_supervisor.sh. Stdin stays open after the script until sbx goes away. The script's
# output streams to stdout and stderr as it comes; stdout ends with the trailer "MARKER
# key=value..." (rc, to, start, end; or busy=1, or err=WHAT). It always exits 0.
# shellcheck disable=SC2086 # /proc/PID/stat is split into its fields on purpose, with globbing off
d=$1 id=$2 mk=$3 tmo=$4 lw=$5 reset=$6 len=$7 line=$8 sync=$9 init=${10} sup=${11}
f=$d/$id o=$d/$id.out e=$d/$id.err st=$d/$id.st
trailer() { printf '%s %s\n' "$mk" "$*"; }
cleanup() { kill "$cw" 2>/dev/null; rm -f -- "$f".*; }
mkdir -m 0700 -- "${d%/*}" 2>/dev/null; mkdir -m 0700 -- "$d" 2>/dev/null
if [ "$len" -ge 0 ] && ! head -c "$len" >"$f.sh"; then trailer err=save; exit 0; fi
gone=0; trap 'gone=1' TERM
{ cat; kill -TERM $$; } <&0 >/dev/null 2>&1 & cw=$!
exec </dev/null
mkfifo -m 0600 "$f.tick" && exec 8<>"$f.tick"
nap() { read -r -t "$1" -u 8 _ 2>/dev/null; }
if ! exec 9>>"$d/lock"; then trailer err=lock; cleanup; exit 0; fi
flock -w "$lw" 9 & fl=$!
wait "$fl"; lr=$?
while [ "$gone" = 0 ] && kill -0 "$fl" 2>/dev/null; do wait "$fl"; lr=$?; done
if [ "$gone" = 1 ]; then kill "$fl" 2>/dev/null; cleanup; exit 0; fi
case $lr in 0) ;; 1) trailer busy=1; cleanup; exit 0 ;; *) trailer err=flock; cleanup; exit 0 ;; esac
for x in "$d"/*.out "$d"/*.err "$d"/*.st; do
	[ -e "$x" ] || continue
	case ${x##*/} in "$id".*) ;; *) rm -f -- "$x" ;; esac
done
sp='' sst='' sep=''; read -r sp sst sep 2>/dev/null <"$d/pid"
start=-
if [ -z "$sp" ]; then start=new
elif [ "$reset" = 1 ]; then start=reset
elif ! alive; then ec=; read -r ec 2>/dev/null <"$d/exited"; start=died:${ec:-?}
fi
if [ "$start" != - ]; then
	if [ -n "$sp" ]; then
		kill -KILL -- "-$sp" 2>/dev/null
		i=0; while alive && [ $i -lt 40 ]; do nap 0.05; i=$((i+1)); done
	fi
	rm -f -- "$d/fifo" "$d/pid" "$d/pid.new" "$d/exited"
	if ! mkfifo -m 0600 "$d/fifo"; then trailer err=mkfifo; cleanup; exit 0; fi
	exec 7<>"$d/fifo"
	# A job of its own (set -m) leads its process group, so setsid forks (util-linux's -f,
	# which busybox's lacks) and the job keeps SIGINT.
	( set -m; setsid "$BASH" -c "$sup" sbx-shell "$d" </dev/null >/dev/null 2>&1 7>&- 8>&- 9>&- & )
	printf '%s\n' "$init" >&7
	i=0; while [ ! -s "$d/pid.new" ] && [ $i -lt 200 ]; do nap 0.025; i=$((i+1)); done
	sp='' sep='' sst=''; read -r sp sep 2>/dev/null <"$d/pid.new"
	if [ -n "$sp" ] && { read -r l <"/proc/$sp/stat"; } 2>/dev/null; then l=${l##*) }; set -f; set -- $l; set +f; sst=${20}; fi
	if [ -z "$sst" ]; then trailer err=start; cleanup; exit 0; fi
	printf '%s %s %s\n' "$sp" "$sst" "$sep" >"$d/pid"
else
	exec 7<>"$d/fifo"
fi
if [ "$len" -lt 0 ]; then : >"$d/last"; trailer "rc=0 start=$start"; cleanup; exit 0; fi
: >"$o"; : >"$e"
# This call's start in clock ticks (/proc/uptime in hundredths, as /proc/PID/stat counts
# starts), not this script's: the agent may have started its process ahead (a spare shim).
# One tick earlier, as gVisor counts a process's start: 137 of 300 processes started right
# after the read showed the tick before it there (none under runc).
cst=; { read -r cst _ </proc/uptime; } 2>/dev/null; cst=${cst/./}
[ -n "$cst" ] && cst=$((10#$cst - 1))
po=0 pe=0 rc='' to=0 end=-
emit() {
	local sz so se
	# wc, not stat: coreutils' stat passes statx AT_NO_AUTOMOUNT, which gVisor 20221219 refuses.
	sz=$(wc -c -- "$o" "$e" 2>/dev/null) || return 0
	set -f; set -- $sz; set +f; so=$1 se=$3
	if [ "$so" -gt "$po" ]; then tail -c "+$((po + 1))" -- "$o" | head -c "$((so - po))"; po=$so; fi
	if [ "$se" -gt "$pe" ]; then tail -c "+$((pe + 1))" -- "$e" | head -c "$((se - pe))" >&2; pe=$se; fi
}
status() { local c m; [ -s "$st" ] || return 1; read -r c m 2>/dev/null <"$st" || return 1; [ "$m" = "$mk" ] || return 1; rc=$c; }
died() {
	local i=0 ec=; while [ ! -s "$d/exited" ] && [ $i -lt 20 ]; do nap 0.05; i=$((i+1)); done
	read -r ec 2>/dev/null <"$d/exited"; rc=${ec:-125} end=died:${ec:-?}
}
over() { local i=0; while [ $i -lt "$1" ]; do status && return 0; alive || { died; return 0; }; emit; nap 0.1; i=$((i+1)); done; return 1; }
killcall() {
	local p l
	for p in /proc/[0-9]*; do
		p=${p#/proc/}; [ "$p" = "$sp" ] && continue
		{ read -r l <"/proc/$p/stat"; } 2>/dev/null || continue
		l=${l##*) }; set -f; set -- $l; set +f
		[ "$3" = "$sp" ] && [ "${20}" -ge "$cst" ] && kill -KILL "$p" 2>/dev/null
	done
}
interrupt() {
	kill -INT -- "-$sp" 2>/dev/null
	over 15; killcall
	status && return; alive || { died; return; }
	over 10 && return
	printf '%s\n' "$sync" >&7; over 10 && return
	kill -KILL -- "-$sp" 2>/dev/null; rc=137 end=killed
}
now() { local e=$EPOCHREALTIME; printf -v "$1" %s "${e//[!0-9]/}"; }
now t0
printf '%s\n' "$line" >&7
iv=0.005
while :; do
	status && break
	alive || { died; break; }
	if [ "$gone" = 1 ]; then interrupt; cleanup; exit 0; fi
	now t
	# shellcheck disable=SC2154 # now sets t and t0
	if [ "$tmo" -gt 0 ] && [ $((t - t0)) -ge $((tmo * 1000)) ]; then to=1; interrupt; break; fi
	emit
	nap "$iv"
	case $iv in 0.005) iv=0.02 ;; 0.02) iv=0.05 ;; *) iv=0.1 ;; esac
done
emit
: >"$d/last"
trailer "rc=$rc to=$to start=$start end=$end"
cleanup
exit 0
