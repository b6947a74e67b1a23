#!/usr/bin/env bash
# Brings up, beside the system dockerd (which it never stops, restarts or reconfigures), the
# engines the engine matrix tests run against (cmd/engines_engine_test.go), each on a socket of
# its own: a rootful Podman service, and a rootless Podman and a rootless Docker daemon run by
# the unprivileged user sbx-rootless. sbx's sandbox image is built in the system engine and
# loaded into each, as no registry is reachable. Idempotent: every step checks first.
#
# Workarounds for this machine, not for the engines (the product makes none of them): Podman
# runs with runc (crun refuses the hybrid cgroup v1 layout here) and the cgroupfs manager (no
# systemd) and default ulimits within the hard limits here (root lacks CAP_SYS_RESOURCE, so
# Podman's default raise of nofile fails), and /dev/net/tun is made 0666 as distributions ship it (slirp4netns opens it as the
# rootless user).
#
# It writes $SBX_TEST_ENGINES_FILE (engine name, socket and the user to run sbx as, one per
# line) for the tests, and logs each engine under $STATE_DIR/engines.
set -euo pipefail

STATE_DIR=${SBX_TEST_STATE_DIR:-/var/lib/sbx-test}
RUN_DIR=/run/sbx-test
ENGINES_FILE=${SBX_TEST_ENGINES_FILE:-$RUN_DIR/engines}
LOG_DIR=$STATE_DIR/engines
ROOTLESS_USER=sbx-rootless
IMAGES=(debian:bookworm-slim sbx-sandbox:bookworm-slim)

say() { printf 'test-engines: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "the engine matrix is set up by root (it adds a user and starts daemons)"

ensure_packages() {
	local missing=()
	command -v podman >/dev/null 2>&1 || missing+=(podman)
	command -v newuidmap >/dev/null 2>&1 || missing+=(uidmap)
	command -v slirp4netns >/dev/null 2>&1 || missing+=(slirp4netns)
	command -v rootlesskit >/dev/null 2>&1 || missing+=(rootlesskit)
	# Podman's init for --init (Debian's podman only recommends it).
	[ -x /usr/libexec/podman/catatonit ] || missing+=(catatonit)
	[ ${#missing[@]} = 0 ] && return
	say "installing ${missing[*]} with apt-get"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

ensure_user() {
	if ! id "$ROOTLESS_USER" >/dev/null 2>&1; then
		say "adding the user $ROOTLESS_USER for the rootless engines"
		useradd --create-home --shell /bin/bash "$ROOTLESS_USER"
	fi
	local uid
	uid=$(id -u "$ROOTLESS_USER")
	for f in /etc/subuid /etc/subgid; do
		grep -q "^$ROOTLESS_USER:" "$f" 2>/dev/null || echo "$ROOTLESS_USER:300000:65536" >>"$f"
	done
	install -d -o "$ROOTLESS_USER" -g "$ROOTLESS_USER" -m 0700 "/run/user/$uid" "/run/user/$uid/podman"
	[ "$(stat -c %a /dev/net/tun)" = 666 ] || chmod 0666 /dev/net/tun
}

sock_up() { curl -fsS --max-time 5 --unix-socket "$1" http://d/_ping >/dev/null 2>&1; }

# start NAME SOCKET COMMAND... starts COMMAND in the background unless SOCKET answers, and
# waits for it.
start() {
	local name=$1 sock=$2
	shift 2
	if sock_up "$sock"; then
		say "$name answers on $sock"
		return
	fi
	say "starting $name on $sock (log: $LOG_DIR/$name.log)"
	setsid nohup "$@" >"$LOG_DIR/$name.log" 2>&1 </dev/null &
	local pid=$!
	for _ in $(seq 1 60); do
		if sock_up "$sock"; then
			return
		fi
		kill -0 "$pid" 2>/dev/null || break
		sleep 1
	done
	tail -n 20 "$LOG_DIR/$name.log" >&2 || true
	die "$name did not answer on $sock within 60 s"
}

# load NAME SOCKET loads IMAGES from the system engine into the engine at SOCKET when that
# lacks one or holds another version.
load() {
	local name=$1 sock=$2 img want have stale=()
	for img in "${IMAGES[@]}"; do
		want=$(docker image inspect --format '{{.Id}}' "$img")
		have=$(curl -fsS --unix-socket "$sock" "http://d/images/$img/json" 2>/dev/null |
			python3 -c 'import json,sys; print(json.load(sys.stdin)["Id"])' 2>/dev/null || true)
		[ "${have#sha256:}" = "${want#sha256:}" ] || stale+=("$img")
	done
	[ ${#stale[@]} = 0 ] && return
	say "loading ${stale[*]} into $name"
	docker save "${stale[@]}" | curl -fsS --unix-socket "$sock" -X POST -H 'Content-Type: application/x-tar' \
		--data-binary @- "http://d/images/load?quiet=1" >/dev/null
}

mkdir -p "$LOG_DIR" "$RUN_DIR"
ensure_packages
ensure_user
uid=$(id -u "$ROOTLESS_USER")
home=/home/$ROOTLESS_USER
# The rootless user's commands run in a login-like environment of theirs.
as_rootless=(runuser -u "$ROOTLESS_USER" -- env -i HOME="$home" USER="$ROOTLESS_USER"
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin XDG_RUNTIME_DIR="/run/user/$uid")

docker image inspect debian:bookworm-slim >/dev/null 2>&1 || die "the system engine lacks debian:bookworm-slim (test-env.sh makes it)"
if ! docker image inspect sbx-sandbox:bookworm-slim >/dev/null 2>&1; then
	say "building sbx's sandbox image in the system engine (sbx image build)"
	(cd "$(dirname "$0")/.." && CGO_ENABLED=0 go build -o "$RUN_DIR/sbx" . && "$RUN_DIR/sbx" image build >&2)
fi

# Read by every Podman started here, rootless ones too (CONTAINERS_CONF).
podman_conf=$RUN_DIR/containers.conf
printf '[containers]\ndefault_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]\n' >"$podman_conf"
chmod 0644 "$podman_conf"
as_rootless+=(CONTAINERS_CONF="$podman_conf")

podman_sock=$RUN_DIR/podman.sock
start podman "$podman_sock" env CONTAINERS_CONF="$podman_conf" podman --runtime runc --cgroup-manager cgroupfs \
	--root "$STATE_DIR/podman/root" --runroot "$RUN_DIR/podman" \
	system service --time=0 "unix://$podman_sock"
# Members of the docker group use it, as they use the system engine.
chgrp docker "$podman_sock"
chmod 0660 "$podman_sock"
load podman "$podman_sock"

rootless_podman_sock=/run/user/$uid/podman/podman.sock
start podman-rootless "$rootless_podman_sock" "${as_rootless[@]}" podman --runtime runc --cgroup-manager cgroupfs \
	system service --time=0 "unix://$rootless_podman_sock"
load podman-rootless "$rootless_podman_sock"

rootless_docker_sock=/run/user/$uid/docker.sock
start docker-rootless "$rootless_docker_sock" "${as_rootless[@]}" /usr/share/docker.io/contrib/dockerd-rootless.sh \
	--host "unix://$rootless_docker_sock" --data-root "$home/.local/share/docker" \
	--exec-root "/run/user/$uid/docker" --pidfile "/run/user/$uid/docker.pid"
load docker-rootless "$rootless_docker_sock"

{
	echo "podman unix://$podman_sock 4242"
	echo "podman-rootless unix://$rootless_podman_sock $ROOTLESS_USER"
	echo "docker-rootless unix://$rootless_docker_sock $ROOTLESS_USER"
} >"$ENGINES_FILE.tmp"
mv "$ENGINES_FILE.tmp" "$ENGINES_FILE"
say "engines listed in $ENGINES_FILE"
