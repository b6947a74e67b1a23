# shellcheck shell=bash
# A signal to a background process (proc.go, Kill), run as: bash -c SCRIPT sbx-kill DIR HOW
# SIG TICKS. Sends SIG (HOW is -s for a name, -n for a number) to the process group of the
# process in DIR and waits up to TICKS of 0.2 s for it to exit. Exits 3 when there is no such
# process, 4 when it has already exited, 1 when kill failed (its message on stderr), else 0.
p=$1
[ -e "$p/meta" ] || exit 3
[ -e "$p/exit" ] && exit 4
pid=; read -r pid _ 2>/dev/null <"$p/pid"
[ -n "$pid" ] || exit 4
kill "$2" "$3" -- "-$pid" || exit 1
i=0; while [ ! -e "$p/exit" ] && [ "$i" -lt "$4" ]; do sleep 0.2; i=$((i+1)); done
exit 0
