// Package cacerts reads the extra certificate authorities the caCerts key names (a PEM file,
// a directory of them, or the host's added CAs) and builds the one bundle a sandbox's tools
// are pointed at: the image's own bundle followed by those CAs.
//
// What it reads may lie in a project, written by whoever wrote the repository or by a rw
// sandbox, so reads are bounded, only certificates are kept (a private key in a file is
// refused, never handed on), and no symbolic link inside the project is followed.
package cacerts

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Host is the caCerts value that names the host's added CAs (HostDirs).
const Host = "host"

// MountDir is where a sandbox sees the directory holding its bundle, read-only; BundlePath is
// the bundle itself, which EnvVars point at.
const (
	MountDir   = "/etc/sbx/ca"
	BundleName = "ca-certificates.crt"
	BundlePath = MountDir + "/" + BundleName
)

// HostDirs are where distributions keep the CAs an administrator added to the system's own:
// Debian, Ubuntu and Alpine (update-ca-certificates), Fedora and RHEL (update-ca-trust), Arch
// (trust anchor), openSUSE. The system bundles built from them also hold the distribution's
// public CAs, which a sandbox gets from its image instead.
var HostDirs = []string{
	"/usr/local/share/ca-certificates",
	"/etc/pki/ca-trust/source/anchors",
	"/etc/ca-certificates/trust-source/anchors",
	"/etc/pki/trust/anchors",
}

// SystemBundles are where images keep their system bundle, in the order sbx looks for it (Go's
// crypto/x509 list for Linux): Debian, Ubuntu, Alpine, Arch; Fedora, RHEL; openSUSE; others.
var SystemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// EnvVars are the variables that point a sandbox's tools at BundlePath: OpenSSL (curl, python,
// ruby) and Go read SSL_CERT_FILE, curl also CURL_CA_BUNDLE, Python's requests and pip their
// own, git's HTTPS (GnuTLS on Debian) GIT_SSL_CAINFO; Node.js adds NODE_EXTRA_CA_CERTS to the
// CAs built into it. All but Node's replace the tool's default, hence one full bundle.
var EnvVars = []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"}

// Env is EnvVars set to BundlePath, as NAME=VALUE.
func Env() []string {
	out := make([]string, 0, len(EnvVars))
	for _, name := range EnvVars {
		out = append(out, name+"="+BundlePath)
	}
	return out
}

// Bounds on what Read takes in: certificates are a few KiB each, and a project can hold
// anything under a name ending .pem.
const (
	// MaxBytes bounds the files one caCerts value names, together, and an image's bundle
	// (Debian's is about 220 KiB).
	MaxBytes = 4 << 20
	// maxEntries bounds the directory entries looked at.
	maxEntries = 4096
	// hostDepth is how deep Host looks below HostDirs: update-ca-certificates takes CAs from
	// subdirectories too.
	hostDepth = 4
	// maxLinks bounds the links followed on the way to a path, as the kernel's ELOOP does.
	maxLinks = 40
)

// Error is a caCerts value sbx refuses: what is wrong, and what to do about it.
type Error struct {
	Reason string
	Fix    string
}

func (e *Error) Error() string { return e.Reason }

// Options say how Read looks.
type Options struct {
	// Guard is a directory in which no symbolic link is followed (the project root); "" has none.
	Guard string
	// HostDirs replaces HostDirs for Host when not nil.
	HostDirs []string
}

// Read returns the certificates value names as PEM, each once, in the order found: Host, an
// absolute path of a PEM file, or of a directory whose *.crt and *.pem files are read (not
// its subdirectories). Anything but a certificate in a file, a file without one, a link
// inside opts.Guard and more than MaxBytes in all are refused with an *Error.
func Read(value string, opts Options) ([]byte, error) {
	r := &reader{guard: opts.Guard, budget: MaxBytes, entries: maxEntries, seen: map[string]bool{}}
	switch {
	case value == "":
		return nil, nil
	case value == Host:
		dirs := opts.HostDirs
		if dirs == nil {
			dirs = HostDirs
		}
		if err := r.host(dirs); err != nil {
			return nil, err
		}
	case !filepath.IsAbs(value):
		return nil, &Error{Reason: value + " is not an absolute path", Fix: "write the full path of a PEM file or directory, or host"}
	default:
		if err := r.path(filepath.Clean(value)); err != nil {
			return nil, err
		}
	}
	return r.out, nil
}

type reader struct {
	guard   string
	budget  int64 // bytes left to read
	entries int   // directory entries left to look at
	seen    map[string]bool
	out     []byte
}

func (r *reader) host(dirs []string) error {
	for _, d := range dirs {
		f, err := r.open(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return r.refusal(d, err)
		}
		err = r.dir(f, d, hostDepth)
		f.Close()
		if err != nil {
			return err
		}
	}
	if len(r.out) == 0 {
		return &Error{Reason: "the host has no added CA certificates in " + strings.Join(dirs, ", "),
			Fix: "add yours there (Debian, Ubuntu: copy it to /usr/local/share/ca-certificates/NAME.crt and run update-ca-certificates), or set caCerts to its file"}
	}
	return nil
}

func (r *reader) path(p string) error {
	f, err := r.open(p)
	if err != nil {
		return r.refusal(p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return r.refusal(p, err)
	case fi.IsDir():
		if err := r.dir(f, p, 0); err != nil {
			return err
		}
		if len(r.out) == 0 {
			return &Error{Reason: p + " holds no .crt or .pem file", Fix: "put the CA certificates there as NAME.crt or NAME.pem, or name the file itself"}
		}
		return nil
	case !fi.Mode().IsRegular():
		return &Error{Reason: p + " is neither a regular file nor a directory", Fix: "name a PEM file or a directory of them"}
	}
	return r.file(f, p)
}

// dir reads the *.crt and *.pem regular files in the directory f, and with depth > 0 its
// subdirectories that far down.
func (r *reader) dir(f *os.File, p string, depth int) error {
	var names []string
	for {
		batch, err := f.ReadDir(256)
		for _, e := range batch {
			if r.entries--; r.entries < 0 {
				return &Error{Reason: p + ": more than " + strconv.Itoa(maxEntries) + " directory entries to look through",
					Fix: "keep the CA certificates in a directory of their own"}
			}
			names = append(names, e.Name())
		}
		if errors.Is(err, io.EOF) || len(batch) == 0 {
			break
		}
		if err != nil {
			return r.refusal(p, err)
		}
	}
	sort.Strings(names) // the order update-ca-certificates uses, whatever the directory's
	for _, name := range names {
		lower := strings.ToLower(name)
		cert := strings.HasSuffix(lower, ".crt") || strings.HasSuffix(lower, ".pem")
		if !cert && depth == 0 {
			continue
		}
		full := filepath.Join(p, name)
		ef, err := openEntry(f, full, name, r.guarded(p))
		if err != nil {
			return r.refusal(full, err)
		}
		fi, err := ef.Stat()
		switch {
		case err != nil:
			err = r.refusal(full, err)
		case fi.IsDir() && depth > 0:
			err = r.dir(ef, full, depth-1)
		case fi.Mode().IsRegular() && cert:
			err = r.file(ef, full)
		}
		ef.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// file reads the certificates in the regular file f.
func (r *reader) file(f *os.File, p string) error {
	data, err := io.ReadAll(io.LimitReader(f, r.budget+1))
	if err != nil {
		return r.refusal(p, err)
	}
	if r.budget -= int64(len(data)); r.budget < 0 {
		return &Error{Reason: "the files caCerts names take more than " + strconv.Itoa(MaxBytes>>20) + " MiB (reached at " + p + ")",
			Fix: "name only the CA certificates the sandbox needs"}
	}
	n := 0
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return &Error{Reason: p + " holds a " + b.Type + " block: only certificates are handed to a sandbox",
				Fix: "keep only the CA certificates (-----BEGIN CERTIFICATE-----) in the file"}
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return &Error{Reason: p + " holds a certificate that does not parse: " + err.Error(), Fix: "export the CA certificate again"}
		}
		r.add(c.Raw)
		n++
	}
	if n == 0 {
		return &Error{Reason: p + " holds no PEM certificate", Fix: "give PEM files (-----BEGIN CERTIFICATE-----); convert a DER one with: openssl x509 -inform der -in FILE -out FILE.pem"}
	}
	return nil
}

func (r *reader) add(der []byte) {
	if r.seen[string(der)] {
		return
	}
	r.seen[string(der)] = true
	r.out = append(r.out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
}

func (r *reader) guarded(p string) bool { return r.guard != "" && within(p, r.guard) }

// refusal turns a failure to open or read p into an *Error.
func (r *reader) refusal(p string, err error) error {
	var le *linkError
	switch {
	case errors.As(err, &le):
		return &Error{Reason: le.link + " is a symbolic link inside the project " + r.guard + ", which sbx does not follow: whoever wrote the project, or a rw sandbox, may have made it",
			Fix: "name the file the link points to, or put the certificate itself there"}
	case errors.Is(err, fs.ErrNotExist):
		return &Error{Reason: p + " does not exist", Fix: "check the path; a relative one starts at the directory of the file that sets it"}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &Error{Reason: "cannot read " + p + ": " + err.Error(), Fix: "make it readable, or name another file"}
}

var errTooManyLinks = errors.New("too many levels of symbolic links")

// linkError is a symbolic link met inside the guard.
type linkError struct{ link string }

func (e *linkError) Error() string { return e.link + " is a symbolic link" }

// open opens the file or directory at the absolute path p for reading. Links on the way that
// lie outside the guard are the user's and are followed; from the guard down each step is
// opened from the one before by descriptor without following a link (openBeneath), so none
// planted there is followed, even one swapped in while sbx looks.
func (r *reader) open(p string) (*os.File, error) {
	cur, rest := string(filepath.Separator), splitPath(p)
	for links := 0; len(rest) > 0; {
		if r.guarded(cur) {
			break
		}
		part := rest[0]
		rest = rest[1:]
		if part == ".." {
			cur = filepath.Dir(cur) // cur holds no link: it is resolved
			continue
		}
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return nil, &fs.PathError{Op: "open", Path: p, Err: errTooManyLinks}
		}
		target, err := os.Readlink(next)
		if err != nil {
			return nil, err
		}
		if filepath.IsAbs(target) {
			cur = string(filepath.Separator)
		}
		rest = append(splitPath(target), rest...)
	}
	if !r.guarded(cur) {
		return os.Open(cur)
	}
	rel, err := filepath.Rel(r.guard, cur)
	if err != nil {
		return nil, err
	}
	return openBeneath(r.guard, append(splitPath(rel), rest...))
}

// openBeneath opens the directory guard, then each of names from the one before without
// following a link.
func openBeneath(guard string, names []string) (*os.File, error) {
	f, err := os.Open(guard)
	if err != nil {
		return nil, err
	}
	p := guard
	for _, name := range names {
		if name == ".." {
			f.Close()
			return nil, &fs.PathError{Op: "open", Path: p, Err: errors.New(`a path inside the project may not climb out with ".."`)}
		}
		p = filepath.Join(p, name)
		next, err := openEntry(f, p, name, true)
		f.Close()
		if err != nil {
			return nil, err
		}
		f = next
	}
	return f, nil
}

// splitPath is p's elements, without empty ones and ".".
func splitPath(p string) []string {
	var out []string
	for e := range strings.SplitSeq(filepath.ToSlash(p), "/") {
		if e != "" && e != "." {
			out = append(out, e)
		}
	}
	return out
}

// within reports whether p is dir or inside it.
func within(p, dir string) bool {
	return p == dir || dir == string(filepath.Separator) || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// Bundle is the one file a sandbox's tools are pointed at: the certificates of system (an
// image's bundle, which the image chose) followed by those of extra not already in it, as
// PEM. Only CERTIFICATE blocks are kept, each encoded anew.
func Bundle(system, extra []byte) []byte {
	seen := map[string]bool{}
	var out []byte
	for _, data := range [][]byte{system, extra} {
		for rest := data; ; {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			if b.Type == "CERTIFICATE" && !seen[string(b.Bytes)] {
				seen[string(b.Bytes)] = true
				out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes})...)
			}
		}
	}
	return out
}
