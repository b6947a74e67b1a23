package engine

import "strings"

// The engine sorts its errors into classes (cerrdefs.IsNotFound, IsConflict,
// IsInvalidArgument, ...), and sbx decides on those. The functions here are for the failures
// a class does not tell apart, where the engine's words are all there is; every reading of an
// engine error's text belongs in this file.

// IsProcessLimit reports whether err is the runtime failing to start a process because the
// container's pids limit is reached. The runtime's failure reaches the API as a system error,
// class Internal like any other runtime failure, so only its text says why: the kernel's
// EAGAIN from clone ("resource temporarily unavailable") or the pids cgroup named.
func IsProcessLimit(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "resource temporarily unavailable") || strings.Contains(msg, "pids")
}

// RefusedMount reports whether err, from creating a container, is about the bind mount of
// source, a host path. A Linux engine that cannot find a source answers InvalidArgument,
// which does not say which mount; engines that share host paths selectively (Docker
// Desktop) answer with other classes. The path in the message is what tells.
func RefusedMount(err error, source string) bool {
	return err != nil && source != "" && strings.Contains(err.Error(), source)
}

// IsMissingBindSource reports whether err, from starting a container, is the engine finding
// a bind mount's source gone from the host. Its class, InvalidArgument, also covers settings
// the host no longer allows (fewer CPUs after a resize), so the text says which.
func IsMissingBindSource(err error) bool {
	return err != nil && strings.Contains(err.Error(), "bind source path does not exist")
}

// Why a pull failed, as PullFailure tells it.
const (
	PullAuth        = "auth"        // the registry refused the credentials, or wants some
	PullNotFound    = "not-found"   // no such repository or tag
	PullUnreachable = "unreachable" // the engine could not talk to the registry
)

// PullFailure sorts the failure of a pull, "" when it cannot tell. The engine passes the
// registry's refusals on as text, in the API error or in the pull's message stream, with a
// class only sometimes (Unauthorized, NotFound) and Docker Hub's "pull access denied"
// covering both a missing repository and missing credentials.
func PullFailure(msg string) string {
	m := strings.ToLower(msg)
	switch {
	case containsAny(m, "connection refused", "no such host", "i/o timeout", "network is unreachable", "no route to host",
		"tls handshake timeout", "server gave http response to https client", "dial tcp", "connection reset"):
		return PullUnreachable
	case containsAny(m, "unauthorized", "authentication required", "no basic auth credentials", "incorrect username or password", "401"):
		return PullAuth
	case containsAny(m, "manifest unknown", "not found", "repository does not exist", "name unknown", "404"):
		return PullNotFound
	case strings.Contains(m, "denied"):
		return PullAuth
	}
	return ""
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
