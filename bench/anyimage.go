package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// busyboxCase: a warm exec in a sandbox on an image FROM scratch holding only a static
// busybox, against docker exec in the same container. sbx reaches it through its agent,
// which it brings itself, as in any image.
func (b *bench) busyboxCase() Case {
	n := b.name("busybox")
	var once sync.Once
	var setupErr error
	prepare := func() error {
		once.Do(func() { setupErr = b.busyboxSandbox(n) })
		return setupErr
	}
	return Case{Name: "busybox image: warm exec", SbxCmd: "sbx exec -- /bin/busybox true (image FROM scratch + static busybox)",
		RefCmd: "docker exec CTR /bin/busybox true", Runs: 30, Ratio: 0.5, Settle: warmSettle,
		Sbx: func(int) (time.Duration, error) {
			if err := prepare(); err != nil {
				return 0, err
			}
			return timed(b.sbxCmd("exec", "-n", n, "--", "/bin/busybox", "true"))
		},
		Docker: func(int) (time.Duration, error) {
			if err := prepare(); err != nil {
				return 0, err
			}
			return timed(docker("exec", "sbx-"+n, "/bin/busybox", "true"))
		}}
}

// busyboxTag is the image busyboxCase builds, removed with the bench's sandboxes.
const busyboxTag = "sbx-bench-busybox:latest"

// busyboxSandbox builds the image from the host's static busybox (scripts/test-env.sh
// installs busybox-static) and creates sandbox n on it.
func (b *bench) busyboxSandbox(n string) error {
	dir, err := os.MkdirTemp("", "sbx-bench-busybox-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("the host's static busybox: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "busybox"), bin, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\nCOPY busybox /bin/busybox\n"), 0o644); err != nil {
		return err
	}
	if out, err := exec.Command("docker", "build", "-q", "-t", busyboxTag, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("docker build: %v: %s", err, out)
	}
	if out, err := b.sbxOut("create", "-n", n, "--image", busyboxTag); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}
