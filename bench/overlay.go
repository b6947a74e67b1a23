package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// overlayFiles is how many files the overlay cases edit.
const overlayFiles = 2000

// editScript appends a line to each of the project's files, from inside a sandbox.
const editScript = `for f in /workspace/src/f*.txt; do echo edited >> "$f"; done`

// overlayBench holds what the overlay cases share: a project for an overlay sandbox and one
// for a rw sandbox, each of overlayFiles files, and a git repository with the same change.
type overlayBench struct {
	once      sync.Once
	err       error
	ov, rw    string            // sandbox names
	dirs      map[string]string // each sandbox's project, where its commands run
	gitDir    string
	diffReady bool
	diffErr   error
}

// cmd runs sbx in sandbox name's project, so the config resolved there is the sandbox's own
// (run from the bench's project, workspace: none would count as a change and recreate it).
func (b *bench) overlayCmd(o *overlayBench, name string, args ...string) *exec.Cmd {
	c := b.sbxCmd(args...)
	c.Dir = o.dirs[name]
	return c
}

func (b *bench) overlayRun(o *overlayBench, name string, args ...string) error {
	if out, err := b.overlayCmd(o, name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("sbx %v: %v: %s", args, err, out)
	}
	return nil
}

// freshOverlay empties the overlay sandbox's upper layer and has it running again.
func (b *bench) freshOverlay(o *overlayBench) error {
	for _, args := range [][]string{{"stop", o.ov}, {"discard", "-n", o.ov}, {"exec", "-n", o.ov, "--", "true"}} {
		if err := b.overlayRun(o, o.ov, args...); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) overlayProject(dir string) error {
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	for i := range overlayFiles {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%04d.txt", i)), []byte("line "+strconv.Itoa(i)+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) overlaySetup(o *overlayBench) error {
	o.once.Do(func() {
		o.ov, o.rw = b.name("ov"), b.name("rw")
		o.dirs = map[string]string{}
		user := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
		for name, ws := range map[string]string{o.ov: "overlay", o.rw: "rw"} {
			o.dirs[name] = filepath.Join(filepath.Dir(b.project), name)
			if o.err = b.overlayProject(o.dirs[name]); o.err != nil {
				return
			}
			if o.err = b.overlayRun(o, name, "create", "-n", name, "--workspace", ws, "--user", user); o.err != nil {
				return
			}
		}
		// The reference for diff: git's view of the same change in a repository.
		o.gitDir = filepath.Join(filepath.Dir(b.project), "git")
		if o.err = b.overlayProject(o.gitDir); o.err != nil {
			return
		}
		script := `git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm base && cd src && for f in f*.txt; do echo edited >> "$f"; done && git diff --stat >/dev/null`
		c := exec.Command("sh", "-c", script)
		c.Dir = o.gitDir
		if out, err := c.CombinedOutput(); err != nil {
			o.err = fmt.Errorf("git: %v: %s", err, out)
		}
	})
	return o.err
}

// overlayCases: editing 2 000 files in an overlay workspace against the same in rw (each
// overlay run starts from an empty upper layer, so every file is copied up, as an agent's
// first edit is), and sbx diff --stat of 2 000 changed files against git diff --stat of the
// same change.
func (b *bench) overlayCases() []Case {
	o := &overlayBench{}
	edit := Case{Name: "overlay: edit 2 000 files", SbxCmd: "sbx exec (workspace: overlay) -- sh -c 'append to 2 000 files'",
		RefCmd: "sbx exec (workspace: rw) -- the same", Runs: 5, Ratio: 1.5,
		Sbx: func(int) (time.Duration, error) {
			if err := b.overlaySetup(o); err != nil {
				return 0, err
			}
			// An empty upper layer again, and the sandbox running, before the clock starts.
			if err := b.freshOverlay(o); err != nil {
				return 0, err
			}
			return timed(b.overlayCmd(o, o.ov, "exec", "-n", o.ov, "--", "sh", "-c", editScript))
		},
		Docker: func(int) (time.Duration, error) {
			if err := b.overlaySetup(o); err != nil {
				return 0, err
			}
			return timed(b.overlayCmd(o, o.rw, "exec", "-n", o.rw, "--", "sh", "-c", editScript))
		}}
	diff := Case{Name: "overlay: diff --stat of 2 000 files", SbxCmd: "sbx diff --stat (2 000 modified files)",
		RefCmd: "git diff --stat (the same change)", Runs: 10, Ratio: 2,
		Sbx: func(int) (time.Duration, error) {
			if err := b.overlaySetup(o); err != nil {
				return 0, err
			}
			// Once: exactly the change git sees, each file with one line appended.
			if !o.diffReady {
				o.diffReady = true
				if o.diffErr = b.freshOverlay(o); o.diffErr == nil {
					o.diffErr = b.overlayRun(o, o.ov, "exec", "-n", o.ov, "--", "sh", "-c", editScript)
				}
			}
			if o.diffErr != nil {
				return 0, o.diffErr
			}
			return timed(b.overlayCmd(o, o.ov, "diff", "-n", o.ov, "--stat"))
		},
		Docker: func(int) (time.Duration, error) {
			if err := b.overlaySetup(o); err != nil {
				return 0, err
			}
			c := exec.Command("git", "diff", "--stat")
			c.Dir = o.gitDir
			return timed(c)
		}}
	return []Case{edit, diff}
}
