package archive

import (
	"path"
	"path/filepath"
	"strings"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Workspace is where relative sandbox paths start.
const Workspace = "/workspace"

// Location is one side of "sbx cp SRC DST".
type Location struct {
	Sandbox string // NAME from NAME:PATH; empty for a local path and for :PATH
	Default bool   // written :PATH: the project's default sandbox
	Stream  bool   // written -: a tar stream on stdin (as SRC) or stdout (as DST)
	// Path is, in a sandbox, absolute and cleaned (relative paths start at Workspace); on the
	// host, filepath.Clean'ed but still relative if it was; empty for a stream.
	Path string
	// TrailingSlash: the path ended in a separator, so as a destination it must be a
	// directory, and as a source it must be one.
	TrailingSlash bool
	// Contents: the path ended in "/." (or was "."): a directory's contents, not the
	// directory itself.
	Contents bool
}

// InSandbox reports whether the location is inside a sandbox.
func (l Location) InSandbox() bool { return l.Sandbox != "" || l.Default }

// CopyArgs are the parsed SRC and DST of "sbx cp".
type CopyArgs struct{ Src, Dst Location }

// Into reports whether the copy goes into the sandbox (rather than out of it).
func (a CopyArgs) Into() bool { return a.Dst.InSandbox() }

// ParseCopyArgs parses "sbx cp SRC DST". A sandbox path is NAME:PATH, or :PATH for the
// project's default sandbox; - is a tar stream; anything else is a local path. As with
// docker cp, an argument that starts with "/" or "." (./a:b, ../a:b) or is absolute on
// this system is local even if it holds a colon. Exactly one side must be a sandbox;
// every mistake is an *errs.UsageError.
func ParseCopyArgs(src, dst string) (CopyArgs, error) {
	s, err := parseLocation("SRC", src)
	if err != nil {
		return CopyArgs{}, err
	}
	d, err := parseLocation("DST", dst)
	if err != nil {
		return CopyArgs{}, err
	}
	switch {
	case s.InSandbox() && d.InSandbox():
		return CopyArgs{}, errs.Usagef("cannot copy from one sandbox to another").
			WithHint("copy to the host first, then from the host into the other sandbox")
	case !s.InSandbox() && !d.InSandbox():
		return CopyArgs{}, errs.Usagef("one of SRC and DST must be a sandbox path").
			WithHint("write a sandbox path as NAME:PATH, or :PATH for the project's default sandbox")
	}
	return CopyArgs{Src: s, Dst: d}, nil
}

func parseLocation(which, arg string) (Location, error) {
	switch {
	case arg == "":
		return Location{}, errs.Usagef("%s is empty", which)
	case arg == "-":
		return Location{Stream: true}, nil
	case strings.ContainsRune(arg, 0):
		return Location{}, errs.Usagef("%s %q contains a NUL byte", which, arg)
	}
	name, p, colon := strings.Cut(arg, ":")
	if !colon || strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, ".") || filepath.IsAbs(arg) {
		return Location{
			Path:          filepath.Clean(arg),
			TrailingSlash: strings.HasSuffix(arg, "/") || strings.HasSuffix(arg, string(filepath.Separator)),
			Contents:      filepath.Base(arg) == ".",
		}, nil
	}
	if name != "" && !validSandboxName(name) {
		return Location{}, errs.Usagef("%s %q: %q is not a sandbox name", which, arg, name).
			WithHint("write a local path that contains a colon as ./PATH")
	}
	if p == "" {
		return Location{}, errs.Usagef("%s %q has no path after the colon", which, arg).
			WithHint("write NAME:. for " + Workspace)
	}
	l := Location{
		Sandbox:       name,
		Default:       name == "",
		TrailingSlash: strings.HasSuffix(p, "/"),
		Contents:      path.Base(p) == ".",
	}
	if path.IsAbs(p) {
		l.Path = path.Clean(p)
	} else {
		l.Path = path.Join(Workspace, p)
	}
	return l, nil
}

// validSandboxName accepts what Docker accepts as a container name: a letter or digit,
// then letters, digits, "_", "." or "-".
func validSandboxName(s string) bool {
	for i, c := range s {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return s != ""
}
