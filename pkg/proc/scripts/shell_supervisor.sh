# shellcheck shell=bash
# A shell session's supervisor (shell.go), started by shell_call.sh as: setsid bash -c SCRIPT
# sbx-shell DIR, as a job of its own. It runs the session's interactive shell in the foreground, reading DIR/fifo, and
# writes its exit status to DIR/exited when it ends. It is started as a job (set -m) because
# without job control bash makes its background children ignore SIGINT, and a shell that starts
# with SIGINT ignored can never be interrupted. The shell is the bash running this script.
d=$1
setsid "$BASH" --norc --noprofile --noediting -i +m <>"$d/fifo" >/dev/null 2>&1
printf '%s\n' "$?" >"$d/exited"
