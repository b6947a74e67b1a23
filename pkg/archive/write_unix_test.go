//go:build unix

package archive

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestWriteTarRefusesSpecialFiles(t *testing.T) {
	work := t.TempDir()
	mkTree(t, work, map[string]string{"src/a": "a"})
	fifo := filepath.Join(work, "src/fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	check := func(src, wantPath string) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, err := WriteTar(context.Background(), io.Discard, src, WriteOptions{})
			done <- err
		}()
		select {
		case err := <-done:
			var se *SourceError
			if !errors.Is(err, ErrSpecialFile) || !errors.As(err, &se) || se.Path != wantPath {
				t.Errorf("WriteTar(%s) = %v; want ErrSpecialFile naming %s", src, err, wantPath)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("WriteTar(%s) hung", src)
		}
	}
	check(filepath.Join(work, "src"), fifo)
	check(fifo, fifo)
	check("/dev/null", "/dev/null")
	os.Remove(fifo)

	sock := filepath.Join(work, "src/sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skip("no unix sockets here:", err)
	}
	defer l.Close()
	check(filepath.Join(work, "src"), sock)
}
