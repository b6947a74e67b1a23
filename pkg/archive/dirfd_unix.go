//go:build unix

package archive

import (
	"io/fs"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// renameAt moves oldName in the directory from to newName in the directory to, by
// descriptor: neither directory is looked up again, and renameat follows no link.
func renameAt(from *hostDir, oldName string, to *hostDir, newName string) error {
	return unix.Renameat(int(from.file.Fd()), oldName, int(to.file.Fd()), newName)
}

// setDirAttrs gives the directory name in d its mode and, when set, its times. The
// directory is opened without following a link and changed by descriptor, since a Root's
// Chmod would follow a link swapped in under that name.
func setDirAttrs(d *hostDir, name string, mode fs.FileMode, mtime time.Time) error {
	fd, err := unix.Openat(int(d.file.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, uint32(mode.Perm())); err != nil {
		return err
	}
	if mtime.IsZero() {
		return nil
	}
	ts := unix.NsecToTimespec(mtime.UnixNano())
	return unix.UtimesNanoAt(int(d.file.Fd()), name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

// claim holds a shared lock on d until d is closed; every copy into d holds one. Only a
// copy that gets the lock exclusively, so that no other copy runs there, first removes the
// staging directories that killed copies left, so a live copy's is never taken for one.
func claim(d *hostDir) {
	fd := int(d.file.Fd())
	if syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		removeLeftovers(d)
	}
	_ = syscall.Flock(fd, syscall.LOCK_SH)
}

func removeLeftovers(d *hostDir) {
	f, err := d.root.Open(".")
	if err != nil {
		return
	}
	ents, _ := f.ReadDir(-1)
	f.Close()
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), StagingPrefix) {
			forceRemove(d.root, e.Name())
		}
	}
}
