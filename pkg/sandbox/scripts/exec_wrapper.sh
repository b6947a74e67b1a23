# shellcheck shell=bash
# The wrapper of every command sbx runs (exec.go, Exec), run as: bash -c SCRIPT sbx-exec ID TICKS
# GRACE CTL WATCH CMD... The engine cannot kill an exec, and once the pids limit is full no new
# exec can start, so it starts a watchdog first: WATCH (exec_watchdog.sh) in a session of its own,
# which ends the command's process group after TICKS of 0.2 s (0: never), when the client goes
# away (CTL stdin: it reads the exec's stdin to its EOF; CTL tick: the command owns stdin) or
# when the command ends; ID names the command under /tmp/.sbx-exec (exec_cancel.sh,
# exec_oom_check.sh). CMD then replaces the wrapper, so it is the exec's main process and keeps
# the TTY. With CTL detach, WATCH is the Launcher (pkg/proc's proc_launch.sh), which starts CMD
# as a background process instead. Exits 127 when CMD is not found; otherwise the exit status is CMD's.
id=$1 ticks=$2 grace=$3 ctl=$4 watch=$5; shift 5; unset SBX_AGENT
case $1 in */*) ;; *) if ! type -P -- "$1" >/dev/null 2>&1; then echo "sbx: $1: command not found" >&2; exit 127; fi ;; esac
if [ "$ctl" = detach ]; then exec "$BASH" -c "$watch" sbx-launch "$ticks" "$grace" "$@"; fi
d=/tmp/.sbx-exec
if ! { mkdir -p "$d" && echo $$ >"$d/$id" && mkfifo "$d/$id.tick"; } 2>/dev/null; then d=; fi
if [ "$ctl" = stdin ]; then
	setsid "$BASH" -c "$watch" sbx-watch $$ "$ticks" "$grace" stdin "$d" "$id" 0<&0 >/dev/null 2>&1 &
	exec </dev/null
else
	setsid "$BASH" -c "$watch" sbx-watch $$ "$ticks" "$grace" tick "$d" "$id" </dev/null >/dev/null 2>&1 &
fi
exec -- "$@"
