package adversarial_test

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/internal/clitest"
)

// A sandbox prepares a tree in its /tmp; sbx cp copies it out into a host directory that
// sits among files a hostile tree would like to reach. Nothing outside the destination may
// change, and a refused copy changes nothing at all.
type hostileFiles struct {
	name  string
	setup string // bash run in the sandbox, in /tmp/hf
	src   string // the sandbox path copied, relative to /tmp/hf unless absolute
	args  []string
	// refused, when set, is part of the error the copy must fail with.
	refused string
	// host prepares the host side before the copy; check inspects it after a copy that
	// succeeded. Both get the work directory (dst is work/dst).
	host  func(t *testing.T, work string)
	check func(t *testing.T, work string)
}

// oddNames are names a sandbox can give files that a careless copier would mangle or
// misread as options, paths or globs.
var oddNames = []string{"-rf", "--help", " lead and trail ", "new\nline", "tab\there", "ünïcödé ✓", "...", "*", "?[a]",
	"$(id)", "`id`", "'quote'", "\"dq\"", "semi;colon", "back\x01ctl", strings.Repeat("n", 255)}

var hostileFileCases = []hostileFiles{
	{name: "symlink to a host path", setup: "mkdir s && ln -s /etc/passwd s/passwd", src: "s", refused: `"s/passwd": symlink refused`},
	{name: "symlink escaping the destination", setup: "mkdir s && ln -s ../../outside/keep s/up", src: "s", refused: `"s/up": symlink refused`},
	{name: "symlink to the host root", setup: "mkdir s && ln -s / s/root && echo x >s/z", src: "s", refused: `"s/root": symlink refused`},
	{name: "the copied path itself is a symlink", setup: "ln -s /etc s", src: "s", refused: "is a symlink"},
	{name: "a FIFO", setup: "mkdir s && mkfifo s/fifo", src: "s", refused: `"s/fifo": FIFO refused`},
	{name: "a device node", src: "/dev/null", refused: "device node refused"},
	{name: "a huge sparse file", setup: "mkdir s && truncate -s 64G s/sparse", src: "s", refused: "exceeds the total size cap"},
	{name: "a deep tree", setup: "d=s; for i in $(seq 100); do d=$d/d; done; mkdir -p $d && touch $d/f", src: "s", refused: "exceeds the path depth cap"},
	{name: "more entries than the cap", setup: "mkdir s && touch s/{1..300}", src: "s", args: []string{"--max-entries", "100"}, refused: "cap of 100"},
	{name: "a backslash in a name", setup: `mkdir s && touch 's/a\b'`, src: "s", refused: "backslash"},
	{name: "a file in the way of a directory on the host (a symlink)",
		setup: "mkdir -p m/sub && echo pwned >m/sub/x", src: "m",
		host: func(t *testing.T, work string) {
			mkdirs(t, filepath.Join(work, "dst", "m"))
			if err := os.Symlink("../../outside", filepath.Join(work, "dst", "m", "sub")); err != nil {
				t.Fatal(err)
			}
		},
		refused: "cannot overwrite non-directory"},
	{name: "a host symlink in the way of a file is replaced, not followed",
		setup: "mkdir m && echo pwned >m/evil", src: "m",
		host: func(t *testing.T, work string) {
			mkdirs(t, filepath.Join(work, "dst", "m"))
			if err := os.Symlink("../../outside/keep", filepath.Join(work, "dst", "m", "evil")); err != nil {
				t.Fatal(err)
			}
		},
		check: func(t *testing.T, work string) {
			if fi, err := os.Lstat(filepath.Join(work, "dst", "m", "evil")); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("the symlink in the way was not replaced by a file: %v %v", fi, err)
			}
		}},
	{name: "odd names arrive intact", setup: oddNamesScript(), src: "s",
		check: func(t *testing.T, work string) {
			ents, err := os.ReadDir(filepath.Join(work, "dst", "s"))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
			}
			want := slices.Clone(oddNames)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("names after the copy:\n got %q\nwant %q", got, want)
			}
		}},
	{name: "hardlinks arrive as separate files", setup: "mkdir s && echo one >s/a && ln s/a s/b", src: "s",
		check: func(t *testing.T, work string) {
			a, b := filepath.Join(work, "dst", "s", "a"), filepath.Join(work, "dst", "s", "b")
			var sa, sb syscall.Stat_t
			if syscall.Stat(a, &sa) != nil || syscall.Stat(b, &sb) != nil || sa.Ino == sb.Ino || fileText(t, b) != "one\n" {
				t.Errorf("want two independent files with the content: inodes %d %d", sa.Ino, sb.Ino)
			}
		}},
	{name: "setuid and setgid bits are dropped", setup: "mkdir s && echo x >s/f && chmod 6755 s/f", src: "s",
		check: func(t *testing.T, work string) {
			fi, err := os.Stat(filepath.Join(work, "dst", "s", "f"))
			if err != nil || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
				t.Errorf("mode after the copy: %v %v", fi.Mode(), err)
			}
		}},
	{name: "a deep tree within the cap", setup: "d=s; for i in $(seq 60); do d=$d/d; done; mkdir -p $d && echo deep >$d/f", src: "s",
		check: func(t *testing.T, work string) {
			p := filepath.Join(append([]string{work, "dst", "s"}, slices.Repeat([]string{"d"}, 60)...)...)
			if fileText(t, filepath.Join(p, "f")) != "deep\n" {
				t.Error("the deep file did not arrive")
			}
		}},
}

func oddNamesScript() string {
	var b strings.Builder
	b.WriteString("mkdir s")
	for _, n := range oddNames {
		fmt.Fprintf(&b, " && : >s/$'%s'", bashANSI(n))
	}
	return b.String()
}

// bashANSI escapes s for bash's $'...' quoting.
func bashANSI(s string) string {
	var b strings.Builder
	for _, r := range []byte(s) {
		switch {
		case r == '\'' || r == '\\':
			b.WriteByte('\\')
			b.WriteByte(r)
		case r < 0x20 || r >= 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			b.WriteByte(r)
		}
	}
	return b.String()
}

func TestHostileFiles(t *testing.T) {
	sc := filesGroup.start(t)
	s := newSBX(t)
	name := sandboxName("files")
	var setup strings.Builder
	setup.WriteString("set -e; mkdir /tmp/hf; cd /tmp/hf")
	for i, c := range hostileFileCases {
		if c.setup != "" {
			fmt.Fprintf(&setup, "\nmkdir %d; (cd %d && %s)", i, i, c.setup)
		}
	}
	if r := s.Run("exec", "-n", name, "--", "bash", "-c", setup.String()); r.Code != 0 {
		t.Fatalf("preparing the hostile trees: %s", r)
	}
	passwd := hashFile(t, "/etc/passwd")
	for i, c := range hostileFileCases {
		t.Run(c.name, func(t *testing.T) {
			sc.case_(t)
			s := s.In(t)
			work := t.TempDir()
			writeFile(t, filepath.Join(work, "outside", "keep"), "keep\n")
			writeFile(t, filepath.Join(work, "dst", "already"), "here\n")
			if c.host != nil {
				c.host(t, work)
			}
			before := clitest.Snapshot(t, work)
			src := c.src
			if !filepath.IsAbs(src) {
				src = fmt.Sprintf("/tmp/hf/%d/%s", i, src)
			}
			r := s.Run(append(append([]string{"cp"}, c.args...), name+":"+src, filepath.Join(work, "dst")+"/")...)
			after := clitest.Snapshot(t, work)
			if c.refused != "" {
				if r.Code == 0 || !strings.Contains(r.Stderr, c.refused) {
					t.Errorf("want the copy refused with %q: %s", c.refused, r)
				}
				if d := diff(before, after, ""); d != "" {
					t.Errorf("a refused copy changed the host:\n%s", d)
				}
			} else {
				if r.Code != 0 {
					t.Fatalf("copy: %s", r)
				}
				base := filepath.Base(src)
				if d := diff(before, after, filepath.Join("dst", base)); d != "" {
					t.Errorf("the copy changed the host outside dst/%s:\n%s", base, d)
				}
				c.check(t, work)
			}
			if hashFile(t, "/etc/passwd") != passwd {
				t.Error("/etc/passwd changed")
			}
		})
	}
}

// diff lists the paths that differ between two snapshots, except those at or under allowed.
func diff(before, after map[string]string, allowed string) string {
	var out []string
	for _, m := range []map[string]string{before, after} {
		for p := range m {
			if before[p] == after[p] || allowed != "" && (p == allowed || strings.HasPrefix(p, allowed+"/")) {
				continue
			}
			if line := fmt.Sprintf("%s: %q -> %q", p, before[p], after[p]); !slices.Contains(out, line) {
				out = append(out, line)
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

func hashFile(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

func fileText(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Error(err)
	}
	return string(data)
}

func mkdirs(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

// sbx killed during a copy, either way: the destination gets the whole item or nothing, and
// the next copy into the same directory works and clears the killed one's staging.
func TestFaultKilledDuringCp(t *testing.T) {
	sc := faultsGroup.start(t)
	s := newSBX(t)
	name := sandboxName("kill-cp")
	// 48 MiB out of a sandbox held to 2% of a CPU: its tar and the agent's relay need a good
	// fraction of a second of CPU for it, so the copy is still streaming for several seconds
	// after its staging directory appears, and the kill lands mid-stream.
	const size = 48 << 20
	if r := s.Run("create", "-n", name, "--cpus", "0.02"); r.Code != 0 {
		t.Fatalf("%s", r)
	}
	if r := s.Run("exec", "-n", name, "--", "bash", "-c", fmt.Sprintf("head -c %d /dev/zero >/tmp/big", size)); r.Code != 0 {
		t.Fatalf("%s", r)
	}
	t.Run("out of the sandbox", func(t *testing.T) {
		sc.case_(t)
		s := s.In(t)
		dst := t.TempDir()
		cmd := s.Cmd("cp", name+":/tmp/big", dst+"/")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it while it stages: its staging directory exists, the item does not yet.
		waitFor(t, 30*time.Second, func() bool { return len(staging(t, dst)) > 0 })
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		if _, err := os.Lstat(filepath.Join(dst, "big")); err == nil {
			t.Errorf("a killed copy left %s/big behind", dst)
		}
		if r := s.Run("cp", name+":/tmp/big", dst+"/"); r.Code != 0 {
			t.Fatalf("the next copy: %s", r)
		}
		if fi, err := os.Stat(filepath.Join(dst, "big")); err != nil || fi.Size() != size {
			t.Errorf("the next copy: %v %v", fi, err)
		}
		if left := staging(t, dst); len(left) > 0 {
			t.Errorf("staging left after the next copy: %v", left)
		}
	})
	t.Run("into the sandbox", func(t *testing.T) {
		sc.case_(t)
		s := s.In(t)
		if r := s.Run("exec", "-n", name, "--", "bash", "-c", "rm -f /tmp/big; mkdir /tmp/in"); r.Code != 0 {
			t.Fatalf("%s", r)
		}
		// The test writes the tar stream itself and stops half way, so the copy is certainly
		// mid-stream when it is killed, however fast the machine.
		cmd := s.Cmd("cp", "-", name+":/tmp/in/")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		tw := tar.NewWriter(stdin)
		if err := tw.WriteHeader(&tar.Header{Name: "in-big", Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool {
			r := s.Run("exec", "-n", name, "--", "bash", "-c", "ls -A /tmp/in")
			return strings.Contains(r.Stdout, ".sbx-cp-")
		})
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		small := filepath.Join(t.TempDir(), "small")
		writeFile(t, small, "small\n")
		if r := s.Run("cp", small, name+":/tmp/in/"); r.Code != 0 {
			t.Fatalf("the next copy: %s", r)
		}
		// The killed copy's item must not be there at all; its staging must be gone.
		r := s.Run("exec", "-n", name, "--", "bash", "-c", "cd /tmp/in && for f in $(ls -A); do echo \"$f $(stat -c %s \"$f\")\"; done")
		if got := strings.TrimSpace(r.Stdout); got != "small 6" {
			t.Errorf("left in the sandbox after a killed copy and a new one: %q (%s)", got, r)
		}
	})
}

// staging lists the copy staging directories in dir.
func staging(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".sbx-cp-") {
			out = append(out, e.Name())
		}
	}
	return out
}
