package config

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/cacerts"
)

// Trust states of a project file.
const (
	TrustNone      = "none"      // the project has no .sbx.yaml
	TrustUntrusted = "untrusted" // never trusted: it may only tighten
	TrustTrusted   = "trusted"   // trusted with exactly this content
	TrustChanged   = "changed"   // trusted once, changed since: it may only tighten again
)

// Trust says whether the project file is the user's own word. An untrusted file may tighten
// the sandbox; every setting of it that loosens is refused (see Loosening).
type Trust struct {
	State  string `json:"state"`
	File   string `json:"file,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// TrustedAt is when the user trusted the file; with TrustChanged, the content trusted then.
	TrustedAt *time.Time `json:"trustedAt,omitempty"`
	// Error says why the trust store could not be read; the file is then untrusted.
	Error string `json:"error,omitempty"`
	// Files are the files inside the project the file points to (caCerts, seccompProfile),
	// as they are now: trusting the file trusts them with this content.
	Files []TrustedFile `json:"files,omitempty"`
	// ChangedFile is, with TrustChanged, the one of Files that changed since it was trusted
	// (relative to the project root); empty when the project file itself changed.
	ChangedFile string `json:"changedFile,omitempty"`
}

// TrustedFile is a file a trusted project file points to through Key, with the SHA-256 of
// what sbx reads of it ("" when it could not be read).
type TrustedFile struct {
	Key    string `json:"key"`
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// FilesAsTrusted reports whether every file rec's project file pointed to still holds what
// was trusted, read as Resolve reads it.
func FilesAsTrusted(rec TrustRecord) bool {
	for _, f := range rec.Files {
		if pointedHash(f.Key, f.Path, filepath.Dir(rec.Path)) != f.SHA256 {
			return false
		}
	}
	return true
}

// pointedHash is the SHA-256 of what sbx reads of the file at path for key, "" when it
// cannot be read; root is the project's.
func pointedHash(key, path, root string) string {
	var data []byte
	var err error
	switch key {
	case "caCerts":
		data, err = cacerts.Read(path, cacerts.Options{Guard: root})
	case "seccompProfile":
		data, err = ReadFileLimit(path, maxConfigFile)
	default:
		return ""
	}
	if err != nil {
		return ""
	}
	return ContentHash(data)
}

// Trusted reports whether the project file may loosen the sandbox.
func (t Trust) Trusted() bool { return t.State == TrustTrusted }

// TrustRecord is one trusted file: its path and the SHA-256 of the content the user reviewed.
type TrustRecord struct {
	Path      string    `json:"path"`
	SHA256    string    `json:"sha256"`
	TrustedAt time.Time `json:"trustedAt"`
	// Files are the files inside the project it pointed to, with the content trusted.
	Files []TrustedFile `json:"files,omitempty"`
}

// TrustStore keeps the trusted project files in one JSON file of the user's state directory.
// Writers take a lock beside it, so concurrent sbx trust calls do not lose each other's records.
type TrustStore struct {
	Path string
	Now  func() time.Time
}

// maxTrustFile bounds the store: a record is about 200 bytes.
const maxTrustFile = 16 << 20

type trustFile struct {
	Version int           `json:"version"`
	Files   []TrustRecord `json:"files"`
}

// List returns every trusted file, sorted by path.
func (s *TrustStore) List() ([]TrustRecord, error) {
	tf, err := s.read()
	if err != nil {
		return nil, err
	}
	return tf.Files, nil
}

// Lookup returns the record of the file at path.
func (s *TrustStore) Lookup(path string) (TrustRecord, bool, error) {
	tf, err := s.read()
	if err != nil {
		return TrustRecord{}, false, err
	}
	i := slices.IndexFunc(tf.Files, func(r TrustRecord) bool { return r.Path == path })
	if i < 0 {
		return TrustRecord{}, false, nil
	}
	return tf.Files[i], true, nil
}

// Trust records the file at path with the hash of the content the user reviewed, and the
// files inside the project it points to (Trust.Files of the review).
func (s *TrustStore) Trust(path, sum string, files ...TrustedFile) (TrustRecord, error) {
	rec := TrustRecord{Path: path, SHA256: sum, TrustedAt: s.Now().UTC().Truncate(time.Second), Files: files}
	err := s.update(func(tf *trustFile) bool {
		tf.Files = slices.DeleteFunc(tf.Files, func(r TrustRecord) bool { return r.Path == path })
		tf.Files = append(tf.Files, rec)
		return true
	})
	return rec, err
}

// Revoke forgets the file at path; false when it was not trusted.
func (s *TrustStore) Revoke(path string) (bool, error) {
	found := false
	err := s.update(func(tf *trustFile) bool {
		n := len(tf.Files)
		tf.Files = slices.DeleteFunc(tf.Files, func(r TrustRecord) bool { return r.Path == path })
		found = len(tf.Files) != n
		return found
	})
	return found, err
}

func (s *TrustStore) read() (*trustFile, error) {
	f, err := os.Open(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return &trustFile{Version: 1}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the trust store: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTrustFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading the trust store %s: %w", s.Path, err)
	}
	if len(data) > maxTrustFile {
		return nil, fmt.Errorf("the trust store %s is larger than %s", s.Path, FormatSize(maxTrustFile))
	}
	var tf trustFile
	if err := json.Unmarshal(data, &tf); err != nil {
		return nil, fmt.Errorf("the trust store %s is not valid JSON: %w", s.Path, err)
	}
	slices.SortFunc(tf.Files, func(a, b TrustRecord) int { return strings.Compare(a.Path, b.Path) })
	return &tf, nil
}

// update changes the store under its lock and writes it atomically when change says so.
func (s *TrustStore) update(change func(*trustFile) bool) error {
	dir := filepath.Dir(s.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the state directory: %w", err)
	}
	lock, err := flock.Open(context.Background(), s.Path+".lock", true, true)
	if err != nil {
		return fmt.Errorf("locking the trust store: %w", err)
	}
	defer lock.Close()
	tf, err := s.read()
	if err != nil {
		return err
	}
	if !change(tf) {
		return nil
	}
	tf.Version = 1
	slices.SortFunc(tf.Files, func(a, b TrustRecord) int { return strings.Compare(a.Path, b.Path) })
	data, err := json.MarshalIndent(tf, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".trust.*.tmp")
	if err != nil {
		return fmt.Errorf("writing the trust store: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the trust store: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the trust store: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.Path); err != nil {
		return fmt.Errorf("writing the trust store: %w", err)
	}
	return nil
}

// ContentHash is the hex SHA-256 that trust records for a file's content.
func ContentHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// trustOf judges the project file at path with content data, and the files inside the
// project it points to, against the store.
func trustOf(store *TrustStore, path string, data []byte, files []TrustedFile) Trust {
	t := Trust{State: TrustUntrusted, File: path, SHA256: ContentHash(data), Files: files}
	if store == nil {
		return t
	}
	rec, ok, err := store.Lookup(path)
	switch {
	case err != nil:
		t.Error = err.Error()
	case !ok:
	case rec.SHA256 != t.SHA256:
		t.State, t.TrustedAt = TrustChanged, &rec.TrustedAt
	default:
		t.State, t.TrustedAt = TrustTrusted, &rec.TrustedAt
		// A file the config points to is part of what was trusted: a repository (or a rw
		// sandbox) that rewrites it changes what the trusted config does.
		for _, f := range files {
			if !slices.Contains(rec.Files, f) {
				t.State, t.ChangedFile = TrustChanged, filepath.Base(f.Path)
				if rel, err := filepath.Rel(filepath.Dir(path), f.Path); err == nil {
					t.ChangedFile = filepath.ToSlash(rel)
				}
				break
			}
		}
	}
	return t
}

// projectFiles hashes what r reads of the files inside the project that its project file
// points to: the CA certificates caCerts names (as read for the sandbox) and the seccomp
// profile.
func (r *Resolved) projectFiles() []TrustedFile {
	var out []TrustedFile
	inProject := func(p string) bool {
		rel, err := filepath.Rel(r.ProjectRoot, canonical(p))
		return err == nil && filepath.IsLocal(rel)
	}
	c := r.Config
	if r.Sources["caCerts"].Layer == LayerProject && filepath.IsAbs(c.CACerts) && inProject(c.CACerts) {
		// The certificates as read for the sandbox: what was hashed is what it gets.
		f := TrustedFile{Key: "caCerts", Path: c.CACerts}
		if r.caErr == nil {
			f.SHA256 = ContentHash(r.caPEM)
		}
		out = append(out, f)
	}
	if r.Sources["seccompProfile"].Layer == LayerProject && filepath.IsAbs(c.SeccompProfile) && inProject(c.SeccompProfile) {
		out = append(out, TrustedFile{Key: "seccompProfile", Path: c.SeccompProfile, SHA256: pointedHash("seccompProfile", c.SeccompProfile, r.ProjectRoot)})
	}
	return out
}

// refusals turns what an untrusted project file loosens into refused settings.
func (t Trust) refusals(ls []Loosening) []Problem {
	why := "the project file is not trusted"
	if t.State == TrustChanged {
		why = "the project file changed since you trusted it"
		if t.ChangedFile != "" {
			why = t.ChangedFile + ", which the project file points to, changed since you trusted it"
		}
		if t.TrustedAt != nil {
			why += " on " + t.TrustedAt.UTC().Format(time.DateOnly)
		}
	}
	out := make([]Problem, 0, len(ls))
	for _, l := range ls {
		out = append(out, Problem{Key: l.Key, Source: l.Source, Value: l.Value, Untrusted: true,
			Reason: "loosens the sandbox: it " + l.Allows + " (refused: " + why + ")",
			Fix:    "review " + t.File + " and run \"sbx trust\" to accept it; or remove the setting, or make it yourself (your config file, a flag or an SBX_ variable)"})
	}
	return out
}

// FileHash is ContentHash of the config file at path, read as Resolve reads it.
func FileHash(path string) (string, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return "", err
	}
	return ContentHash(data), nil
}
