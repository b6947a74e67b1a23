package egress

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egress.log")
	line := func(host string) string {
		return `{"time":"2026-12-01T10:00:00Z","host":"` + host + `","allowed":true,"bytesUp":0,"bytesDown":0,"durationMs":0}` + "\n"
	}
	appendTo := func(s string) {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	ticks := make(chan time.Time)
	got := make(chan string, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Follow(ctx, path, 2, ticks, func(e Entry) error { got <- e.Host; return nil })
	}()
	// tick waits until Follow has taken a tick, and then until it is back waiting for the
	// next, so everything written before tick() has been read.
	tick := func() { ticks <- time.Time{}; ticks <- time.Time{} }
	expect := func(want ...string) {
		t.Helper()
		tick()
		var have []string
		for len(got) > 0 {
			have = append(have, <-got)
		}
		if strings.Join(have, ",") != strings.Join(want, ",") {
			t.Errorf("got %v, want %v", have, want)
		}
	}
	expect() // no file yet
	appendTo(line("a") + line("b") + line("c"))
	expect("a", "b", "c") // the file appeared after Follow started: all of it is new
	appendTo(line("d")[:20])
	expect()
	appendTo(line("d")[20:] + line("e"))
	expect("d", "e")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendToRotated := func(s string) {
		f, _ := os.OpenFile(path+".1", os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString(s)
		f.Close()
	}
	appendToRotated(line("f"))
	appendTo(line("g"))
	expect("f", "g") // the old file is finished first
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendTo(`{"host":"h"}` + "\n") // shorter than what was read: the file shrank
	expect("h")
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Follow returned %v", err)
	}
}

func TestFollowTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egress.log")
	var b strings.Builder
	for _, h := range []string{"a", "b", "c"} {
		b.WriteString(`{"time":"2026-12-01T10:00:00Z","host":"` + h + `"}` + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		tail int
		want string
	}{{0, ""}, {2, "b,c"}, {5, "a,b,c"}} {
		var got []string
		ctx, cancel := context.WithCancel(context.Background())
		if tt.tail == 0 {
			cancel() // nothing to emit: Follow must get to waiting, and then end
		}
		err := Follow(ctx, path, tt.tail, nil, func(e Entry) error {
			got = append(got, e.Host)
			if len(got) == min(tt.tail, 3) {
				cancel()
			}
			return nil
		})
		cancel()
		if err != context.Canceled {
			t.Errorf("tail %d: %v", tt.tail, err)
		}
		if strings.Join(got, ",") != tt.want {
			t.Errorf("tail %d: got %v", tt.tail, got)
		}
	}
}

// Follow ends with the error emit returns.
func TestFollowEmitError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egress.log")
	if err := os.WriteFile(path, []byte(`{"host":"a"}`+"\n"+`{"host":"b"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := io.EOF // any error of emit's
	var got []string
	err := Follow(context.Background(), path, 2, nil, func(e Entry) error {
		got = append(got, e.Host)
		return stop
	})
	if err != stop || strings.Join(got, ",") != "a" {
		t.Errorf("got %v, %v", got, err)
	}
}
