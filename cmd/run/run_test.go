package run

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func parse(t *testing.T, args ...string) (*RunOptions, error) {
	t.Helper()
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
	var got *RunOptions
	cmd := NewCmdRun(f, func(_ context.Context, o *RunOptions) error { got = o; return nil })
	cmd.SetArgs(args)
	cmd.SetOut(os.Stderr)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return got, err
}

func TestNewCmdRunFlags(t *testing.T) {
	o, err := parse(t, "--lang", "python", "-c", "print(1)")
	if err != nil || o.Lang != "python" || o.Code != "print(1)" || !o.CodeSet || o.Stdin || o.File != "" || o.MaxOutput != sandbox.DefaultMaxOutput || o.TimeoutSet || o.JSON {
		t.Errorf("%+v %v", o, err)
	}
	o, err = parse(t, "-n", "web", "-l", "bash", "-c", "", "--timeout", "3s", "--max-output", "10", "--json")
	if err != nil || o.Name != "web" || !o.CodeSet || o.Timeout != 3*time.Second || !o.TimeoutSet || o.MaxOutput != 10 || !o.JSON {
		t.Errorf("empty code is code: %+v %v", o, err)
	}
	o, err = parse(t, "--lang", "node", "-")
	if err != nil || !o.Stdin || o.CodeSet {
		t.Errorf("stdin: %+v %v", o, err)
	}
	o, err = parse(t, "-f", "dir/script.py")
	if err != nil || o.Lang != "python" || o.File != "dir/script.py" {
		t.Errorf("language from the file: %+v %v", o, err)
	}
	o, err = parse(t, "-f", "Hello.java", "--lang", "bash")
	if err != nil || o.Lang != "bash" {
		t.Errorf("--lang wins over the extension: %+v %v", o, err)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--lang", "python"}, "exactly once"},
		{[]string{"--lang", "python", "-c", "1", "-"}, "exactly once"},
		{[]string{"--lang", "python", "-c", "1", "-f", "x.py"}, "exactly once"},
		{[]string{"-c", "1"}, "--lang is required"},
		{[]string{"-f", "x.rb"}, "--lang is required"},
		{[]string{"--lang", "ruby", "-c", "1"}, `unknown language "ruby"`},
		{[]string{"--lang", "python", "-c", "1", "extra"}, `unexpected argument "extra"`},
		{[]string{"--lang", "python", "-c", "1", "--max-output", "0"}, "--max-output"},
		{[]string{"--lang", "python", "-c", "1", "--timeout", "-1s"}, "negative"},
		{[]string{"-n", "Bad Name", "--lang", "python", "-c", "1"}, "name"},
	} {
		if _, err := parse(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestReadCode(t *testing.T) {
	ios, stdin, _, _ := iostreams.Test()
	stdin.WriteString("from stdin \xff")
	if code, err := readCode(&RunOptions{IO: ios, Stdin: true}); err != nil || string(code) != "from stdin \xff" {
		t.Errorf("stdin: %q %v", code, err)
	}
	file := filepath.Join(t.TempDir(), "x.sh")
	if err := os.WriteFile(file, []byte("echo 'EOF'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, err := readCode(&RunOptions{IO: ios, File: file}); err != nil || string(code) != "echo 'EOF'\n" {
		t.Errorf("file: %q %v", code, err)
	}
	if _, err := readCode(&RunOptions{IO: ios, File: file + ".missing"}); errs.ExitCode(err) != errs.CodeUsage {
		t.Errorf("missing file: %v", err)
	}
	if code, err := readCode(&RunOptions{IO: ios, CodeSet: true, Code: "x"}); err != nil || string(code) != "x" {
		t.Errorf("-c: %q %v", code, err)
	}
}
