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
