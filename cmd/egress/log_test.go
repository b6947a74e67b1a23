package egress

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

const logLines = `{"time":"2026-12-01T10:00:00Z","sandbox":"web","method":"GET","host":"deb.debian.org","port":80,"addr":"203.0.113.80","allowed":true,"rule":"deb.debian.org","preset":"@debian","bytesUp":126,"bytesDown":149405,"durationMs":128}
{"time":"2026-12-01T10:00:01Z","sandbox":"web","method":"CONNECT","host":"registry.npmjs.org","port":443,"allowed":false,"reason":"no rule allows it","bytesUp":0,"bytesDown":0,"durationMs":0}
not a line of the proxy's
{"time":"2026-12-01T10:00:02Z","sandbox":"web","event":"reload","rules":3}
{"time":"2026-12-01T10:00:03Z","sandbox":"web","method":"CONNECT","host":"evil\u001b[31m.test","port":443,"allowed":false,"reason":"no rule allows it","bytesUp":0,"bytesDown":0,"durationMs":0}
{"time":"2026-12-01T10:00:04Z","sandbox":"web","method":"CONNECT","host":"unfinished`

func TestLogText(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "egress.log"), []byte(logLines), 0o644); err != nil {
		t.Fatal(err)
	}
	ios, _, out, errOut := iostreams.Test()
	opts := &LogOptions{IO: ios, Path: func(string) string { return filepath.Join(dir, "egress.log") }, Name: "web", Tail: 100}
	if err := logRun(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	want := `2026-12-01T10:00:00Z  allowed  deb.debian.org:80  by deb.debian.org (@debian)  up 126 B, down 149405 B
2026-12-01T10:00:01Z  denied   registry.npmjs.org:443  no rule allows it  up 0 B, down 0 B
2026-12-01T10:00:02Z  reload   3 rules in effect
2026-12-01T10:00:03Z  denied   evil\u001b[31m.test:443  no rule allows it  up 0 B, down 0 B
`
	if out.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", out, want)
	}
	if !strings.Contains(errOut.String(), "skipped 1 lines") {
		t.Errorf("stderr %q", errOut)
	}

	out.Reset()
	opts.JSON, opts.Tail = true, 2
	if err := logRun(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"event":"reload"`) || !strings.Contains(lines[1], `"allowed":false`) {
		t.Errorf("--json --tail 2:\n%s", out)
	}

	opts.Path = func(string) string { return filepath.Join(dir, "missing.log") }
	if err := logRun(context.Background(), opts); errs.ExitCode(err) != errs.CodeError || errs.Hint(err) == "" {
		t.Errorf("no log: %v", err)
	}
}

// The reader takes the rotated file first and says how many decisions rotation dropped.
func TestLogRotated(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "egress.log")
	line := func(host string) string {
		return `{"time":"2026-12-01T10:00:00Z","method":"CONNECT","host":"` + host + `","port":443,"allowed":false,"reason":"no rule allows it","bytesUp":0,"bytesDown":0,"durationMs":0}` + "\n"
	}
	rotated := `{"time":"2026-12-01T09:00:00Z","event":"rotate","dropped":40}` + "\n" + line("a.test") + line("b.test")
	current := `{"time":"2026-12-01T10:00:00Z","event":"rotate","dropped":75}` + "\n" + line("c.test")
	if err := os.WriteFile(path+".1", []byte(rotated), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(current), 0o644); err != nil {
		t.Fatal(err)
	}
	ios, _, out, errOut := iostreams.Test()
	opts := &LogOptions{IO: ios, Path: func(string) string { return path }, Name: "web", Tail: 100}
	if err := logRun(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		hosts = append(hosts, strings.Fields(l)[2])
	}
	if strings.Join(hosts, ",") != "a.test:443,b.test:443,c.test:443" {
		t.Errorf("out:\n%s", out)
	}
	if !strings.Contains(errOut.String(), "75 earlier decisions were dropped") {
		t.Errorf("stderr %q", errOut)
	}
}
