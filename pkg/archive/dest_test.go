package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// planted is what a sandbox copies out: a directory o holding pwned.
var planted = []ent{dir("o/"), file("o/pwned", "P")}

// symlink makes link point to target, as a sandbox with a rw workspace can.
func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// A link in a directory a sandbox may write to (the guarded project) is never followed,
// wherever it sits on the way to the destination and wherever it points; the user's own
// links elsewhere are.
func TestExtractGuardedDestinationLinks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T, work string)
		dst      string
		contents bool
		wantLink string            // the link a refusal names
		want     map[string]string // else what lands, as in TestExtractDestinationRules
	}{
		{name: "destination is a link out of the project", contents: true, dst: "proj/out", wantLink: "proj/out",
			setup: func(t *testing.T, w string) { symlink(t, filepath.Join(w, "outside"), filepath.Join(w, "proj/out")) }},
		{name: "destination is a relative link out", dst: "proj/out/", wantLink: "proj/out",
			setup: func(t *testing.T, w string) { symlink(t, "../outside", filepath.Join(w, "proj/out")) }},
		{name: "a parent is a link out", dst: "proj/sub/out/x", wantLink: "proj/sub/out",
			setup: func(t *testing.T, w string) { symlink(t, "../../outside", filepath.Join(w, "proj/sub/out")) }},
		{name: "a link that stays in the project", contents: true, dst: "proj/out", wantLink: "proj/out",
			setup: func(t *testing.T, w string) { symlink(t, "sub", filepath.Join(w, "proj/out")) }},
		{name: "a file link is not replaced either", dst: "proj/f", wantLink: "proj/f",
			setup: func(t *testing.T, w string) { symlink(t, "../outside/keep", filepath.Join(w, "proj/f")) }},
		{name: "the user's link into the project reaches the sandbox's link", dst: "mine/out/", wantLink: "proj/out",
			setup: func(t *testing.T, w string) {
				symlink(t, "proj", filepath.Join(w, "mine"))
				symlink(t, "../outside", filepath.Join(w, "proj/out"))
			}},
		{name: "the user's link to a directory in the project", contents: true, dst: "mine/x",
			setup: func(t *testing.T, w string) { symlink(t, filepath.Join(w, "proj/sub"), filepath.Join(w, "mine")) },
			want:  map[string]string{"proj/sub/x/pwned": "P", "outside/keep": "K"}},
		{name: "the user's link outside the project", dst: "mine/",
			setup: func(t *testing.T, w string) { symlink(t, "outside", filepath.Join(w, "mine")) },
			want:  map[string]string{"outside/o/pwned": "P"}},
		{name: "the user's link with .. in its target", dst: "a/l/sub/",
			setup: func(t *testing.T, w string) { symlink(t, "../proj", filepath.Join(w, "a/l")) },
			want:  map[string]string{"proj/sub/o/pwned": "P"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			mkTree(t, work, map[string]string{"proj/sub/": "", "outside/keep": "K", "a/": ""})
			tc.setup(t, work)
			before := snapshot(t, work)
			dst := filepath.Join(work, tc.dst)
			if strings.HasSuffix(tc.dst, "/") {
				dst += "/"
			}
			opts := ExtractOptions{Base: "o", Contents: tc.contents, Guarded: []string{filepath.Join(work, "proj")}}
			checkErr := CheckDestination(dst, opts)
			_, err := Extract(context.Background(), bytes.NewReader(tarOf(t, planted...)), dst, opts)
			if tc.want != nil {
				if err != nil || checkErr != nil {
					t.Fatalf("Extract: %v; CheckDestination: %v", err, checkErr)
				}
				for p, body := range tc.want {
					if got := readFile(t, filepath.Join(work, p)); got != body {
						t.Errorf("%s = %q; want %q", p, got, body)
					}
				}
				return
			}
			var le *LinkError
			if !errors.As(err, &le) || le.Link != filepath.Join(work, tc.wantLink) {
				t.Fatalf("err = %v; want a *LinkError naming %s", err, tc.wantLink)
			}
			if !errors.As(checkErr, &le) {
				t.Errorf("CheckDestination: %v; want the same refusal", checkErr)
			}
			if errs.ExitCode(err) != errs.CodeError || !strings.Contains(errs.Hint(err), "if you made that link") ||
				!strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), filepath.Join(work, "proj")) {
				t.Errorf("exit %d, error %q, hint %q", errs.ExitCode(err), err, errs.Hint(err))
			}
			if d := diffSnap(before, snapshot(t, work)); d != "" {
				t.Errorf("a refused copy changed the filesystem:\n%s", d)
			}
		})
	}
}

// The link's target is the sandbox's text: it is quoted, so it cannot drive the terminal.
func TestLinkErrorQuotesTheTarget(t *testing.T) {
	e := &LinkError{Dst: "/p/out", Link: "/p/out", Target: "/x\x1b[2J", Guard: "/p"}
	if strings.Contains(e.Error(), "\x1b") || !strings.Contains(e.Error(), `destination "/p/out" is a symbolic link (to "/x\x1b[2J") inside "/p"`) {
		t.Errorf("%q", e.Error())
	}
}

// A sandbox can swap a directory for a link between sbx looking at it and opening it, or
// after sbx planned a merge into it. Either way the copy is refused and nothing lands where
// the link points: here a directory of the project the sandbox cannot write itself
// (protected), and a directory outside the project.
func TestExtractDirectorySwappedForALink(t *testing.T) {
	for _, tc := range []struct {
		name      string
		target    string // what the swapped-in link points to, from proj/d
		resolving bool   // swap while the destination proj/d is resolved; else after a merge into proj is planned
	}{
		{name: "while resolving, to a protected directory", target: "protected", resolving: true},
		{name: "while resolving, out of the project", target: "../outside", resolving: true},
		{name: "after planning a merge, to a protected directory", target: "protected"},
		{name: "after planning a merge, out of the project", target: "../outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			mkTree(t, work, map[string]string{"proj/d/old": "old", "proj/protected/": "", "outside/": ""})
			opts := ExtractOptions{Base: "o", Contents: true, Guarded: []string{filepath.Join(work, "proj")}}
			d := filepath.Join(work, "proj/d")
			swapped := false
			swapNow := func() {
				if swapped {
					return
				}
				swapped = true
				if err := os.Rename(d, d+".moved"); err != nil {
					t.Fatal(err)
				}
				symlink(t, tc.target, d)
			}
			// Either the contents of o go into proj/d, or o holds a d that merges into proj/d.
			dst, archive := d, tarOf(t, dir("o/"), file("o/pwned", "P"))
			if tc.resolving {
				opts.beforeOpen = func(p string) {
					if p == d {
						swapNow()
					}
				}
			} else {
				dst, archive = filepath.Join(work, "proj"), tarOf(t, dir("o/"), dir("o/d/"), file("o/d/pwned", "P"))
				opts.beforeMove = swapNow
			}
			_, err := Extract(context.Background(), bytes.NewReader(archive), dst, opts)
			if !swapped {
				t.Fatal("the swap never happened")
			}
			if err == nil || !strings.Contains(err.Error(), "changed while sbx opened it") {
				t.Errorf("err = %v; want the swap refused", err)
			}
			for _, p := range []string{"proj/protected", "outside"} {
				if ents, _ := os.ReadDir(filepath.Join(work, p)); len(ents) != 0 {
					t.Errorf("%s holds %v", p, ents)
				}
			}
			assertNoStaging(t, work)
		})
	}
}

// What lands on the host gets the user's umask, and never a setuid, setgid or sticky bit,
// whether it is created where nothing was or moved into an existing directory.
func TestExtractAppliesUmask(t *testing.T) {
	archive := tarOf(t,
		ent{name: "base/", typ: tar.TypeDir, mode: 0o777},
		ent{name: "base/rw", typ: tar.TypeReg, mode: 0o666, body: "f"},
		ent{name: "base/x", typ: tar.TypeReg, mode: 0o777, body: "x"},
		ent{name: "base/suid", typ: tar.TypeReg, mode: 0o4777, body: "s"},
		ent{name: "base/sgid", typ: tar.TypeReg, mode: 0o2777, body: "g"},
		ent{name: "base/sticky/", typ: tar.TypeDir, mode: 0o1777},
		ent{name: "base/new/", typ: tar.TypeDir, mode: 0o777},
		ent{name: "base/implicit/f", typ: tar.TypeReg, mode: 0o666, body: "i"},
	)
	for _, tc := range []struct {
		umask     fs.FileMode
		file, dir fs.FileMode
	}{
		{umask: 0o022, file: 0o644, dir: 0o755},
		{umask: 0o002, file: 0o664, dir: 0o775},
	} {
		for _, merge := range []bool{false, true} {
			work := t.TempDir()
			dst := filepath.Join(work, "out")
			if merge {
				mkTree(t, work, map[string]string{"out/sticky/": ""}) // a directory that exists keeps its mode
				if err := os.Chmod(filepath.Join(dst, "sticky"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Extract(context.Background(), bytes.NewReader(archive), dst,
				ExtractOptions{Base: "base", Contents: merge, Umask: tc.umask})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]fs.FileMode{"rw": tc.file, "x": tc.dir, "suid": tc.dir, "sgid": tc.dir,
				"sticky": fs.ModeDir | tc.dir, "new": fs.ModeDir | tc.dir, "implicit/f": tc.file,
				// A directory the archive implies but does not describe gets 0755, less the umask.
				"implicit": fs.ModeDir | 0o755&^tc.umask}
			if merge {
				want["sticky"] = fs.ModeDir | 0o700
			} else {
				want[""] = fs.ModeDir | tc.dir
			}
			for p, mode := range want {
				fi, err := os.Lstat(filepath.Join(dst, p))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode() != mode {
					t.Errorf("umask %03o, merge %v: %s has mode %v; want %v", tc.umask, merge, p, fi.Mode(), mode)
				}
			}
		}
	}
}

// A copy's source may go through the user's own links, never through one in a directory a
// sandbox writes to.
func TestCheckSource(t *testing.T) {
	base := t.TempDir()
	proj, outside, mine := filepath.Join(base, "proj"), filepath.Join(base, "outside"), filepath.Join(base, "mine")
	for _, d := range []string{filepath.Join(proj, "real"), filepath.Join(outside, "keys"), mine} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		filepath.Join(proj, "out"):         outside,
		filepath.Join(proj, "real", "in"):  filepath.Join(outside, "keys"),
		filepath.Join(base, "to-proj"):     proj, // the user's own link into the project
		filepath.Join(proj, "real", "rel"): "../real",
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	guarded := []string{proj}
	for _, tt := range []struct {
		src        string
		followLast bool
		link       string // "" when accepted
	}{
		{src: filepath.Join(proj, "out", "keys"), link: filepath.Join(proj, "out")},
		{src: filepath.Join(proj, "out"), followLast: true, link: filepath.Join(proj, "out")},
		{src: filepath.Join(proj, "out")}, // copied as a link, nothing read through it
		{src: filepath.Join(proj, "real", "in", "x"), link: filepath.Join(proj, "real", "in")},
		{src: filepath.Join(base, "to-proj", "out", "keys"), link: filepath.Join(proj, "out")},
		{src: filepath.Join(base, "to-proj", "real")},
		{src: filepath.Join(proj, "real", "rel", "in"), link: filepath.Join(proj, "real", "rel")},
		{src: filepath.Join(mine)},
	} {
		err := CheckSource(tt.src, guarded, tt.followLast)
		var le *LinkError
		switch {
		case tt.link == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.src, err)
		case tt.link != "" && (!errors.As(err, &le) || le.Link != tt.link || !le.Source || !strings.HasPrefix(err.Error(), "source ")):
			t.Errorf("%s: %v, want the link %s refused", tt.src, err, tt.link)
		}
	}
}
