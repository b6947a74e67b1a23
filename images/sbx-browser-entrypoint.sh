#!/bin/bash
# Entrypoint of sbx's browser image. It starts, as the unprivileged user:
#   - Chromium with the DevTools protocol on 127.0.0.1:$CDP_INTERNAL_PORT;
#   - unless headless: Xvfb on $DISPLAY, x11vnc on 127.0.0.1:5900 guarded by a password,
#     and noVNC through websockify on 127.0.0.1:$NOVNC_INTERNAL_PORT;
#   - sbx's relay ("sbx browser-relay", sbx's own binary mounted read-only) on 0.0.0.0:9222
#     and 0.0.0.0:6080, which forwards to those only requests that carry the sandbox's
#     token: the published ports, and the container's address, are reachable by every user
#     of the host.
# With arguments, it runs them once everything is up. It exits when any part stops, with
# that part's status, so a crashed browser ends the container instead of leaving it half up.
#
# Environment:
#   SBX_BROWSER_HEADLESS=1   no display, VNC or noVNC; only the DevTools port
#   SBX_BROWSER_TOKEN        required: the token the relay asks every client for
#   SBX_BROWSER_RELAY        required: the path of sbx's binary, which runs the relay
#   SBX_VNC_PASSWORD         required unless headless; VNC uses its first 8 characters
#   SBX_BROWSER_SCREEN       Xvfb screen, default 1280x800x24
#   SBX_BROWSER_URL          first page, default about:blank
#   SBX_BROWSER_FLAGS        extra Chromium flags, split on spaces
set -euo pipefail

# sbx's agent, when it is the command, carries its source in SBX_AGENT: only the command
# gets it back, the browser's own processes have no use for it.
agent_src=${SBX_AGENT-}
unset SBX_AGENT

readonly CDP_PORT=9222 CDP_INTERNAL_PORT=9223 NOVNC_PORT=6080 NOVNC_INTERNAL_PORT=6081 VNC_PORT=5900

log() { printf 'sbx-browser: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 64; }

headless=0
case "${SBX_BROWSER_HEADLESS:-}" in
1 | true | yes) headless=1 ;;
"" | 0 | false | no) ;;
*) die "SBX_BROWSER_HEADLESS must be 1 or 0, not \"$SBX_BROWSER_HEADLESS\"" ;;
esac

# The root is read-only: everything Chromium and X write goes under a private directory in
# the tmpfs, and HOME moves there when the image's home is not writable.
run_dir=$(mktemp -d "${TMPDIR:-/tmp}/sbx-browser.XXXXXX") ||
	die "cannot create a directory in ${TMPDIR:-/tmp}; mount a writable tmpfs there"
chmod 700 "$run_dir"
if [ ! -w "${HOME:-/nonexistent}" ]; then
	export HOME="$run_dir/home"
	mkdir -p "$HOME"
fi

# Without the relay nothing may listen beyond loopback: the image fails closed.
token=${SBX_BROWSER_TOKEN:-}
relay=${SBX_BROWSER_RELAY:-}
unset SBX_BROWSER_TOKEN SBX_BROWSER_RELAY
[ -n "$token" ] || die "SBX_BROWSER_TOKEN is empty; start the browser with sbx browser, which sets it"
[ -x "$relay" ] || die "SBX_BROWSER_RELAY (\"$relay\") is not sbx's binary; start the browser with sbx browser, which mounts it"

vnc_password=${SBX_VNC_PASSWORD:-}
unset SBX_VNC_PASSWORD
if [ "$headless" = 0 ] && [ -z "$vnc_password" ]; then
	die "SBX_VNC_PASSWORD is empty; set it, or set SBX_BROWSER_HEADLESS=1 to run without VNC"
fi

pids=()
names=()
start() {
	local name=$1
	shift
	"$@" &
	pids+=("$!")
	names+=("$name")
}
# shellcheck disable=SC2317 # called by the trap below
stop_all() {
	trap - EXIT
	[ "${#pids[@]}" -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
}
trap stop_all EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

chromium_flags=(
	# The container is the sandbox: Chromium's own needs user namespaces or setuid, which
	# the hardened container forbids.
	--no-sandbox
	# Docker's /dev/shm is 64 MB; shared memory goes to the tmpfs instead.
	--disable-dev-shm-usage
	--user-data-dir="$run_dir/profile"
	--remote-debugging-address=127.0.0.1
	--remote-debugging-port="$CDP_INTERNAL_PORT"
	--no-first-run
	--no-default-browser-check
	--password-store=basic
	--disable-gpu
	# Only fatal errors: D-Bus, absent in a sandbox, would otherwise flood the log that
	# explains a failed start.
	--log-level=3
)
if [ "$headless" = 1 ]; then
	chromium_flags+=(--headless)
else
	export DISPLAY=:99
	# Made here because Xvfb, not being root, only complains that it cannot make it.
	[ -d /tmp/.X11-unix ] || mkdir -m 1777 /tmp/.X11-unix
	start Xvfb Xvfb "$DISPLAY" -screen 0 "${SBX_BROWSER_SCREEN:-1280x800x24}" -nolisten tcp
	for _ in $(seq 1 100); do
		[ -S "/tmp/.X11-unix/X${DISPLAY#:}" ] && break
		kill -0 "${pids[0]}" 2>/dev/null || die "Xvfb exited during startup"
		sleep 0.1
	done
	[ -S "/tmp/.X11-unix/X${DISPLAY#:}" ] || die "Xvfb did not create its socket within 10 s"

	# printf is a builtin, so the password never shows in a process's arguments; x11vnc
	# deletes the file once it has read it.
	(umask 077 && printf '%s\n' "$vnc_password" >"$run_dir/vncpass")
	start x11vnc x11vnc -display "$DISPLAY" -localhost -rfbport "$VNC_PORT" \
		-passwdfile "rm:$run_dir/vncpass" -forever -shared -noxdamage -quiet
	start websockify websockify --web /usr/share/novnc "127.0.0.1:$NOVNC_INTERNAL_PORT" "127.0.0.1:$VNC_PORT"
fi
unset vnc_password

# The token goes in a file the relay removes once read: in its arguments, every user of the
# host would see it.
(umask 077 && printf '%s\n' "$token" >"$run_dir/token")
unset token
relay_args=(browser-relay --token-file "$run_dir/token" --cdp "0.0.0.0:$CDP_PORT=127.0.0.1:$CDP_INTERNAL_PORT")
[ "$headless" = 1 ] || relay_args+=(--novnc "0.0.0.0:$NOVNC_PORT=127.0.0.1:$NOVNC_INTERNAL_PORT")
start relay "$relay" "${relay_args[@]}"

# SBX_BROWSER_FLAGS is split on spaces on purpose: it carries several flags.
# shellcheck disable=SC2206
extra_flags=(${SBX_BROWSER_FLAGS:-})
start chromium chromium "${chromium_flags[@]}" "${extra_flags[@]}" "${SBX_BROWSER_URL:-about:blank}"
log "DevTools on port $CDP_PORT$([ "$headless" = 1 ] && echo ", headless" || echo ", noVNC on port $NOVNC_PORT")"

if [ "$#" -gt 0 ]; then
	[ -z "$agent_src" ] || export SBX_AGENT="$agent_src"
	start "$1" "$@"
fi

status=0
ended=
wait -n -p ended "${pids[@]}" || status=$?
for i in "${!pids[@]}"; do
	if [ "${pids[$i]}" = "$ended" ]; then
		log "${names[$i]} exited with status $status; stopping the rest"
	fi
done
exit "$status"
