//go:build unix

package protect

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Prepare creates what the plan mounts but is missing: an empty hooks directory or config
// file in a git directory, as git init makes them, owned like that directory. It goes down
// from the root one directory at a time without following links, so a link swapped in since
// Find cannot send it elsewhere, and it never replaces anything.
func (p *Plan) Prepare() error {
	for _, m := range p.Mounts {
		if m.Create == "" {
			continue
		}
		if err := createEmpty(p.Root, m.Path, m.Create); err != nil {
			return errs.Failure(fmt.Errorf("protected paths: creating %s so it can be protected: %w", m.Path, err),
				"check that the project's git directories belong to you, or use --workspace ro or none")
		}
	}
	return nil
}

func createEmpty(root, rel, kind string) error {
	dir, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(dir) }()
	for _, c := range strings.Split(path.Dir(rel), "/") {
		next, err := unix.Openat(dir, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		_ = unix.Close(dir)
		dir = next
	}
	var parent unix.Stat_t
	if err := unix.Fstat(dir, &parent); err != nil {
		return err
	}
	name := path.Base(rel)
	switch kind {
	case CreateDir:
		err = unix.Mkdirat(dir, name, 0o755)
	case CreateFile:
		var fd int
		fd, err = unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err == nil {
			_ = unix.Close(fd)
		}
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	if errors.Is(err, unix.EEXIST) {
		// Made meanwhile: fine when it is what we would have made; the engine mounts it.
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if want := map[string]uint32{CreateDir: unix.S_IFDIR, CreateFile: unix.S_IFREG}[kind]; uint32(st.Mode)&unix.S_IFMT != want {
			return fmt.Errorf("it appeared meanwhile as something other than a %s", kind)
		}
		return nil
	}
	if err != nil {
		return err
	}
	// Owned like the git directory. Only root can give it away; anyone else made it as
	// themselves, which is what they could have done by hand.
	if err := unix.Fchownat(dir, name, int(parent.Uid), int(parent.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.EPERM) {
		return err
	}
	return nil
}
