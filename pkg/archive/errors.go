package archive

import (
	"errors"
	"fmt"
	"strings"
)

// Reasons an archive entry is refused by Extract. They are wrapped in an *EntryError that
// names the entry; test for them with errors.Is.
var (
	ErrEmptyName    = errors.New("empty name")
	ErrBadChar      = errors.New("name contains a NUL or a backslash")
	ErrLongName     = fmt.Errorf("name longer than %d bytes", maxNameLen)
	ErrAbsolute     = errors.New("absolute name")
	ErrEscapes      = errors.New("name leaves the destination")
	ErrDotDot       = errors.New(`name contains a ".." element`)
	ErrOutsideBase  = errors.New("name is outside the copied path")
	ErrSymlink      = errors.New("symlink refused")
	ErrHardlink     = errors.New("hardlink refused")
	ErrDevice       = errors.New("device node refused")
	ErrFIFO         = errors.New("FIFO refused")
	ErrUnsupported  = errors.New("unsupported entry type")
	ErrSizeMismatch = errors.New("data does not match the header size")
	ErrCorrupt      = errors.New("corrupt archive")
	ErrConflict     = errors.New("conflicts with an earlier entry")
)

// EntryError is an archive entry that Extract refused or could not write.
type EntryError struct {
	Name string // the entry's name as found in the archive
	Err  error  // one of the Err* reasons above, possibly wrapped, or an I/O error
}

// Error quotes the name with %q so a hostile name cannot drive the user's terminal, and
// shortens a long one so it cannot flood it.
func (e *EntryError) Error() string {
	return fmt.Sprintf("archive entry %s: %v", quoteName(e.Name), e.Err)
}
func (e *EntryError) Unwrap() error { return e.Err }

// Hint tells the user how to get at a tree that holds entries sbx will not extract.
func (e *EntryError) Hint() string {
	for _, kind := range []error{ErrSymlink, ErrHardlink, ErrDevice, ErrFIFO, ErrUnsupported} {
		if errors.Is(e.Err, kind) {
			return "sbx cp extracts only files and directories from a sandbox; " +
				"to get the raw tar stream instead, copy to - (sbx cp NAME:PATH - > out.tar)"
		}
	}
	return ""
}

// LimitError is an archive that crossed one of Extract's caps.
type LimitError struct {
	Entry string // the entry that crossed the cap
	Cap   string // "total size", "entry count" or "path depth"
	Limit int64  // the cap in force
	Unit  string // "bytes", "entries" or "levels"
	Flag  string // the sbx cp flag that raises it
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("archive entry %s: exceeds the %s cap of %d %s (%s)", quoteName(e.Entry), e.Cap, e.Limit, e.Unit, e.Flag)
}

// Hint says how to raise the cap; cmd.Main prints it on its own line.
func (e *LimitError) Hint() string {
	return fmt.Sprintf("if you expect a copy this large, raise the cap: %s=%d", e.Flag, 2*e.Limit)
}

const maxQuoted = 200

func quoteName(name string) string {
	if len(name) <= maxQuoted {
		return fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf("%q... (%d bytes)", strings.ToValidUTF8(name[:maxQuoted], ""), len(name))
}

func entryErr(name string, err error) error { return &EntryError{Name: name, Err: err} }
