# shellcheck shell=bash
# A shell session's supervisor (shell.go), started by shell_call.sh as: setsid -f bash -c SCRIPT
# sbx-shell DIR. It runs the session's interactive shell in the foreground, reading DIR/fifo, and
# writes its exit status to DIR/exited when it ends. It is started with setsid -f rather than &
# because bash makes its background children ignore SIGINT, and a shell that starts with SIGINT
# ignored can never be interrupted.
d=$1
setsid bash --norc --noprofile --noediting -i +m <>"$d/fifo" >/dev/null 2>&1
printf '%s\n' "$?" >"$d/exited"
