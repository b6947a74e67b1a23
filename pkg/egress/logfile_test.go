package egress

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A sandbox looping requests to a denied host must not fill the host's disk: the log on
// disk (current file and the one rotated file) stays under its bound at every write, and
// every decision is either still in the files or counted as dropped.
func TestLogFileBoundsTheDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egress.log")
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	lf, err := OpenLogFile(path, MinLogFileMax, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	l := &logger{w: lf, sandbox: "web"}
	onDisk := func() int64 {
		var n int64
		for _, p := range []string{path, path + ".1"} {
			if st, err := os.Stat(p); err == nil {
				n += st.Size()
			}
		}
		return n
	}
	const total = 5000 // about 250 bytes each: several rotations of MinLogFileMax
	for i := range total {
		l.request(Entry{Time: at, Method: "CONNECT", Host: fmt.Sprintf("denied-%d.test", i), Port: 443, Reason: "no rule allows it"})
		if n := onDisk(); n > 2*MinLogFileMax {
			t.Fatalf("after %d decisions the log takes %d bytes, over its bound %d", i+1, n, 2*MinLogFileMax)
		}
	}
	if err := lf.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLogFile(path, total)
	if err != nil {
		t.Fatal(err)
	}
	if got.Dropped == 0 || int(got.Dropped)+len(got.Entries) != total || got.Skipped != 0 {
		t.Fatalf("dropped %d + kept %d != %d written (skipped %d)", got.Dropped, len(got.Entries), total, got.Skipped)
	}
	// The kept ones are the newest, in order, across both files.
	for i, e := range got.Entries {
		if want := fmt.Sprintf("denied-%d.test", int(got.Dropped)+i); e.Host != want {
			t.Fatalf("entry %d is %q, want %q", i, e.Host, want)
		}
	}
	// A restarted proxy carries the count on and keeps the bound.
	lf, err = OpenLogFile(path, MinLogFileMax, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	l = &logger{w: lf, sandbox: "web"}
	for i := range total {
		l.request(Entry{Time: at, Method: "CONNECT", Host: fmt.Sprintf("denied-%d.test", total+i), Port: 443, Reason: "no rule allows it"})
	}
	lf.Close()
	if n := onDisk(); n > 2*MinLogFileMax {
		t.Fatalf("after a restart the log takes %d bytes", n)
	}
	again, err := ReadLogFile(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	if int(again.Dropped)+countEntries(t, path) != 2*total {
		t.Fatalf("after a restart: dropped %d + kept %d != %d", again.Dropped, countEntries(t, path), 2*total)
	}
	if len(again.Entries) != 10 || again.Entries[9].Host != fmt.Sprintf("denied-%d.test", 2*total-1) {
		t.Fatalf("last 10: %+v", again.Entries)
	}
}

func countEntries(t *testing.T, path string) int {
	t.Helper()
	all, err := ReadLogFile(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return len(all.Entries)
}

// The mark a host-side waiter takes before changing the rules finds the proxy's reload line
// even when the log rotated in between.
func TestEntriesSinceAcrossRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egress.log")
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	lf, err := OpenLogFile(path, MinLogFileMax, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	l := &logger{w: lf}
	l.request(Entry{Time: at, Host: "before.test"})
	mark := MarkLog(path)
	l.reload(at, 3, nil)
	// Flood until the file holding the reload line is the rotated one.
	for {
		l.request(Entry{Time: at, Host: "flood.test"})
		if _, err := os.Stat(path + ".1"); err == nil {
			break
		}
	}
	l.request(Entry{Time: at, Host: "flood.test"})
	e, ok := FindSince(path, mark, func(e Entry) bool { return e.Event == "reload" || e.Host == "before.test" })
	if !ok || e.Event != "reload" || e.Rules != 3 {
		t.Fatalf("found %+v, %v; want the reload line after the mark", e, ok)
	}
	if _, ok := FindSince(path, MarkLog(path), func(Entry) bool { return true }); ok {
		t.Fatal("an entry after a mark at the end")
	}
}
