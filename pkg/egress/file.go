package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// FileVersion is the only version this code reads and writes.
const FileVersion = 1

// MaxFileSize bounds a rules file; thousands of rules fit in it.
const MaxFileSize = 1 << 20

// File is the rules file the proxy reads and sbx writes, as JSON:
//
//	{"version": 1, "allow": ["@python", "github.com:22"], "deny": ["evil.example"], "internal": ["192.0.2.2"]}
//
// allow and deny hold rules as a config writes them, presets included: the proxy expands
// them with the same code as explain. internal holds addresses or networks refused after
// resolution unless an address rule names them (see NewPolicy). Unknown keys are errors.
type File struct {
	Version  int      `json:"version"`
	Allow    []string `json:"allow"`
	Deny     []string `json:"deny,omitempty"`
	Internal []string `json:"internal,omitempty"`
}

// ParseFile decodes a rules file strictly: unknown keys, trailing data and other versions
// are errors.
func ParseFile(data []byte) (File, error) {
	var f File
	if len(data) > MaxFileSize {
		return f, fmt.Errorf("rules file is larger than %d bytes", MaxFileSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return File{}, fmt.Errorf("decoding rules file: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return File{}, errors.New("decoding rules file: data after the object")
	}
	if f.Version != FileVersion {
		return File{}, fmt.Errorf("rules file version %d, this sbx reads version %d", f.Version, FileVersion)
	}
	return f, nil
}

// Policy compiles the file.
func (f File) Policy() (*Policy, error) {
	allow, err := Expand(f.Allow)
	if err != nil {
		return nil, fmt.Errorf("allow: %w", err)
	}
	deny, err := Expand(f.Deny)
	if err != nil {
		return nil, fmt.Errorf("deny: %w", err)
	}
	var internal []netip.Prefix
	for _, s := range f.Internal {
		p, ok, reason := parseNetwork(strings.TrimSpace(s))
		if !ok {
			if reason == "" {
				reason = "not an address or network"
			}
			return nil, fmt.Errorf("internal %q: %s", s, reason)
		}
		internal = append(internal, p)
	}
	return NewPolicy(allow, deny, internal), nil
}

// ReadFile reads and compiles a rules file.
func ReadFile(path string) (*Policy, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	f, err := ParseFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p, err := f.Policy()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// WriteFile checks f and replaces path with it atomically (a temporary file in the same
// directory, renamed over it), so the proxy never reads half a file. A proxy in a container
// must see the file through a bind mount of its directory, not of the file: a rename gives
// the path a new inode, which a mount of the old file never shows.
func WriteFile(path string, f File) error {
	f.Version = FileVersion
	if _, err := f.Policy(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing rules file: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("writing rules file: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("writing rules file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing rules file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing rules file: %w", err)
	}
	return nil
}
