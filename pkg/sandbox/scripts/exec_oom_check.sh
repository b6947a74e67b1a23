# shellcheck shell=bash
# The OOM check (exec.go, oomKilled), run as: bash -c SCRIPT sbx-helper ID. Waits up to 3 s for
# the watchdog of exec ID to finish, then prints "oom" when the kernel's OOM killer fired while
# the command ran. Exit status 0.
d=/tmp/.sbx-exec; i=0
while [ -e "$d/$1" ] && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done
if [ -e "$d/$1.oom" ]; then rm -f "$d/$1.oom"; echo oom; fi
