# shellcheck shell=bash
# The cancel of an interactive exec (exec.go, cancelExec), run as: bash -c SCRIPT sbx-helper ID
# TICKS. Signals the process group of exec ID: TERM, then KILL after TICKS of 0.2 s. Exit status 0.
read -r p <"/tmp/.sbx-exec/$1" 2>/dev/null || exit 0
kill -TERM -- "-$p" 2>/dev/null || exit 0
i=0; while [ $i -lt "$2" ] && kill -0 -- "-$p" 2>/dev/null; do sleep 0.2; i=$((i+1)); done
kill -KILL -- "-$p" 2>/dev/null; exit 0
