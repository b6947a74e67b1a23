package egress

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestReadLog(t *testing.T) {
	log := `{"time":"2026-12-01T10:00:00Z","method":"GET","host":"a.test","port":80,"allowed":true,"rule":"a.test","bytesUp":1,"bytesDown":2,"durationMs":3}
not json
{"time":"2026-12-01T10:00:01Z","event":"reload","rules":4}

{"time":"2026-12-01T10:00:02Z","host":"` + strings.Repeat("x", MaxLogLine) + `"}
{"time":"2026-12-01T10:00:03Z","method":"CONNECT","host":"b.test","port":443,"allowed":false,"reason":"no rule allows it","bytesUp":0,"bytesDown":0,"durationMs":0}
{"time":"2026-12-01T10:00:04Z","method":"CONNECT","host":"torn`
	entries, skipped, err := ReadLog(strings.NewReader(log), 10)
	if err != nil {
		t.Fatal(err)
	}
	if skipped != 2 || len(entries) != 3 {
		t.Fatalf("skipped %d, entries %+v", skipped, entries)
	}
	if e := entries[0]; e.Host != "a.test" || !e.Allowed || e.BytesUp != 1 || e.BytesDown != 2 || e.DurationMs != 3 || e.Rule != "a.test" {
		t.Errorf("first: %+v", e)
	}
	if e := entries[1]; e.Event != "reload" || e.Rules != 4 {
		t.Errorf("reload: %+v", e)
	}
	if e := entries[2]; e.Host != "b.test" || e.Allowed || e.Reason != "no rule allows it" || !e.Time.Equal(time.Date(2026, 12, 1, 10, 0, 3, 0, time.UTC)) {
		t.Errorf("last: %+v", e)
	}
	last, _, _ := ReadLog(strings.NewReader(log), 2)
	if len(last) != 2 || last[0].Event != "reload" || last[1].Host != "b.test" {
		t.Errorf("last 2: %+v", last)
	}
	if _, _, err := ReadLog(strings.NewReader(log), 0); err == nil {
		t.Error("max 0 accepted")
	}
}

func TestLineSplitterAcrossWrites(t *testing.T) {
	var got []string
	s := lineSplitter{max: 8}
	emit := func(b []byte) { got = append(got, string(b)) }
	for _, chunk := range []string{"ab", "c\nde", "f\n0123", "456789", "abc\nok\n", "12345678\n", "123456789", "\nx"} {
		s.write([]byte(chunk), emit)
	}
	if strings.Join(got, ",") != "abc,def,ok,12345678" || s.skipped != 2 || string(s.partial) != "x" {
		t.Errorf("lines %q skipped %d partial %q", got, s.skipped, s.partial)
	}
}

func TestLoggerClipsAndSerializes(t *testing.T) {
	var buf bytes.Buffer
	l := &logger{w: &buf, sandbox: "web"}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("x", 3600))
	l.request(Entry{Time: at, Method: "GET", Host: "a\x1b[31m<b>" + strings.Repeat("é", 400), Port: 80, Reason: "r"})
	l.reload(at, 3, nil)
	l.reload(at, 3, errors.New("bad\nfile"))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines: %q", lines)
	}
	host := "a?[31m<b>" + strings.Repeat("é", (maxLoggedHost-9)/2)
	want := `{"time":"2026-12-01T09:00:00Z","sandbox":"web","method":"GET","host":"` + host + `","port":80,"allowed":false,"reason":"r","bytesUp":0,"bytesDown":0,"durationMs":0}`
	if lines[0] != want {
		t.Errorf("request line\n got %s\nwant %s", lines[0], want)
	}
	if lines[1] != `{"time":"2026-12-01T09:00:00Z","sandbox":"web","event":"reload","rules":3}` {
		t.Errorf("reload line %s", lines[1])
	}
	if lines[2] != `{"time":"2026-12-01T09:00:00Z","sandbox":"web","event":"reload","error":"bad?file; keeping the previous rules"}` {
		t.Errorf("reload error line %s", lines[2])
	}
}
