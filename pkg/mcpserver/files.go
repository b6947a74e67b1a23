package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// The file tools run small bash scripts as the sandbox's user, so they see exactly what its
// commands see: its permissions, its read-only mounts. Exit codes 3 to 5 carry a reason for
// the agent on stderr.

// readScript is the read_file tool's script: see its header.
//
//go:embed scripts/read_file.sh
var readScript string

// writeScript is the write_file tool's script: see its header.
//
//go:embed scripts/write_file.sh
var writeScript string

// listScript is the list_files tool's script: see its header.
//
//go:embed scripts/list_dir.sh
var listScript string

// maxListOutput bounds what listScript prints: MaxListEntries+1 records of a type, a size
// and a path of at most 5 levels of names (255 bytes each) below the directory.
const maxListOutput = 4 << 20

// ReadInput is the read_file tool's arguments.
type ReadInput struct {
	Path   string `json:"path" jsonschema:"file path; relative paths start in the project directory under /workspace"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to start at (default 0)"`
	Limit  int64  `json:"limit,omitempty" jsonschema:"most bytes to return (default 262144, at most 1048576)"`
}

// ReadOutput is a piece of a file.
type ReadOutput struct {
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding" jsonschema:"utf-8, or base64 when the bytes are not valid UTF-8"`
	Size     int64  `json:"size" jsonschema:"the file's whole size in bytes"`
	Offset   int64  `json:"offset"`
	Bytes    int64  `json:"bytes" jsonschema:"bytes returned"`
	More     bool   `json:"more" jsonschema:"the file goes on after what was returned; read again from offset+bytes"`
}

// WriteInput is the write_file tool's arguments.
type WriteInput struct {
	Path       string `json:"path" jsonschema:"file path; relative paths start in the project directory under /workspace"`
	Content    string `json:"content" jsonschema:"the file's new content"`
	Encoding   string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64 for binary content"`
	CreateDirs bool   `json:"createDirs,omitempty" jsonschema:"create missing parent directories"`
}

// WriteOutput says what was written.
type WriteOutput struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

// ListInput is the list_files tool's arguments.
type ListInput struct {
	Path  string `json:"path,omitempty" jsonschema:"directory (default: the project directory under /workspace)"`
	Depth int    `json:"depth,omitempty" jsonschema:"how deep to go (default 2, at most 5)"`
}

// FileEntry is one file in a listing.
type FileEntry struct {
	Path string `json:"path" jsonschema:"relative to the listed directory"`
	Type string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size int64  `json:"size"`
}

// ListOutput is a directory listing.
type ListOutput struct {
	Path      string      `json:"path"`
	Entries   []FileEntry `json:"entries"`
	Truncated bool        `json:"truncated" jsonschema:"there were more entries than the listing holds"`
}

func (s *server) readFile(ctx context.Context, in ReadInput) (ReadOutput, error) {
	p, err := s.resolvePath(in.Path)
	if err != nil {
		return ReadOutput{}, err
	}
	limit := in.Limit
	switch {
	case in.Offset < 0:
		return ReadOutput{}, errs.Usagef("offset must not be negative")
	case limit == 0:
		limit = DefaultReadLimit
	case limit < 0 || limit > MaxReadLimit:
		return ReadOutput{}, errs.Usagef("limit must be between 1 and %d", MaxReadLimit)
	}
	// The size line, then at most limit bytes.
	out := &sandbox.LimitedBuffer{What: "the answer to reading " + p, Limit: int(limit) + 1<<10}
	if err := s.script(ctx, "reading "+p, readScript, []string{p, strconv.FormatInt(in.Offset, 10), strconv.FormatInt(limit, 10)}, nil, out); err != nil {
		return ReadOutput{}, err
	}
	head, data, ok := bytes.Cut(out.Bytes(), []byte("\n"))
	size, err := strconv.ParseInt(string(head), 10, 64)
	if !ok || err != nil {
		return ReadOutput{}, fmt.Errorf("reading %s: unexpected answer from the sandbox", p)
	}
	res := ReadOutput{Path: p, Encoding: "utf-8", Size: size, Offset: in.Offset, Bytes: int64(len(data)), More: in.Offset+int64(len(data)) < size}
	if utf8.Valid(data) {
		res.Content = string(data)
	} else {
		res.Content, res.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return res, nil
}

func (s *server) writeFile(ctx context.Context, in WriteInput) (WriteOutput, error) {
	p, err := s.resolvePath(in.Path)
	if err != nil {
		return WriteOutput{}, err
	}
	if p == "/" || strings.HasSuffix(in.Path, "/") {
		return WriteOutput{}, errs.Usagef("path %q names a directory, not a file", in.Path)
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8", "utf8":
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return WriteOutput{}, errs.Usagef("content is not valid base64: %v", err)
		}
	default:
		return WriteOutput{}, errs.Usagef("unknown encoding %q: use utf-8 or base64", in.Encoding)
	}
	if len(data) > MaxWriteSize {
		return WriteOutput{}, errs.Usagef("content is %d bytes, more than the %d write_file accepts", len(data), MaxWriteSize)
	}
	mk := "0"
	if in.CreateDirs {
		mk = "1"
	}
	if err := s.script(ctx, "writing "+p, writeScript, []string{p, mk}, bytes.NewReader(data), io.Discard); err != nil {
		return WriteOutput{}, err
	}
	return WriteOutput{Path: p, Bytes: int64(len(data))}, nil
}

func (s *server) listFiles(ctx context.Context, in ListInput) (ListOutput, error) {
	dir := s.WorkDir
	if in.Path != "" {
		var err error
		if dir, err = s.resolvePath(in.Path); err != nil {
			return ListOutput{}, err
		}
	}
	depth := in.Depth
	switch {
	case depth == 0:
		depth = DefaultListDepth
	case depth < 0 || depth > MaxListDepth:
		return ListOutput{}, errs.Usagef("depth must be between 1 and %d", MaxListDepth)
	}
	out := &sandbox.LimitedBuffer{What: "the listing of " + dir, Limit: maxListOutput}
	if err := s.script(ctx, "listing "+dir, listScript, []string{dir, strconv.Itoa(depth), strconv.Itoa(MaxListEntries)}, nil, out); err != nil {
		return ListOutput{}, err
	}
	entries, truncated := ParseListing(out.Bytes(), MaxListEntries)
	return ListOutput{Path: dir, Entries: entries, Truncated: truncated}, nil
}

// ParseListing reads listScript's records, keeps at most max sorted by path, and says whether
// there were more.
func ParseListing(b []byte, max int) ([]FileEntry, bool) {
	entries := []FileEntry{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, 0); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 3)
		if len(f) != 3 {
			continue
		}
		size, _ := strconv.ParseInt(f[1], 10, 64)
		entries = append(entries, FileEntry{Path: f[2], Type: fileType(f[0]), Size: size})
	}
	truncated := len(entries) > max
	if truncated {
		entries = entries[:max]
	}
	slices.SortFunc(entries, func(a, b FileEntry) int { return strings.Compare(a.Path, b.Path) })
	return entries, truncated
}

func fileType(y string) string {
	switch y {
	case "f":
		return "file"
	case "d":
		return "dir"
	case "l":
		return "symlink"
	}
	return "other"
}

// script runs one of the file scripts in the sandbox. A non-zero exit becomes an error with
// what the script said on stderr.
func (s *server) script(ctx context.Context, what, body string, args []string, stdin io.Reader, stdout io.Writer) error {
	m, sb, release, err := s.Sandbox(ctx)
	if err != nil {
		return err
	}
	defer release()
	var stderr bytes.Buffer
	res, err := m.Exec(ctx, sb, sandbox.ExecOptions{
		Cmd:         sb.Script(body, "sbx-file", args...),
		Interactive: stdin != nil, Stdin: stdin, Stdout: stdout, Stderr: &sandbox.CapWriter{W: &stderr, Limit: 4 << 10},
		Timeout: time.Minute,
	})
	switch {
	case err != nil:
		return err
	case res.Canceled:
		return ctx.Err()
	case res.TimedOut:
		return fmt.Errorf("%s: timed out", what)
	case res.ExitCode != 0:
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", res.ExitCode)
		}
		return fmt.Errorf("%s: %s", what, msg)
	}
	return nil
}
