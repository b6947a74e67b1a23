package run

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func TestNewCmdRunFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdRun, []cmdtest.FlagCase[RunOptions]{
		{Args: []string{"--lang", "python", "-c", "print(1)"}, Check: func(o *RunOptions) bool {
			return o.Lang == "python" && o.Code == "print(1)" && o.CodeSet && !o.Stdin && o.File == "" && o.MaxOutput == sandbox.DefaultMaxOutput && !o.TimeoutSet && !o.JSON
		}},
		// Empty code is code.
		{Args: []string{"-n", "web", "-l", "bash", "-c", "", "--timeout", "3s", "--max-output", "10", "--json"}, Check: func(o *RunOptions) bool {
			return o.Name == "web" && o.CodeSet && o.Timeout == 3*time.Second && o.TimeoutSet && o.MaxOutput == 10 && o.JSON
		}},
		{Args: []string{"--lang", "node", "-"}, Check: func(o *RunOptions) bool { return o.Stdin && !o.CodeSet }},
		// The language from the file's extension, unless --lang says otherwise.
		{Args: []string{"-f", "dir/script.py"}, Check: func(o *RunOptions) bool { return o.Lang == "python" && o.File == "dir/script.py" }},
		{Args: []string{"-f", "Hello.java", "--lang", "bash"}, Check: func(o *RunOptions) bool { return o.Lang == "bash" }},
		{Args: []string{"--lang", "python"}, WantErr: "exactly once"},
		{Args: []string{"--lang", "python", "-c", "1", "-"}, WantErr: "exactly once"},
		{Args: []string{"--lang", "python", "-c", "1", "-f", "x.py"}, WantErr: "exactly once"},
		{Args: []string{"-c", "1"}, WantErr: "--lang is required"},
		{Args: []string{"-f", "x.rb"}, WantErr: "--lang is required"},
		{Args: []string{"--lang", "ruby", "-c", "1"}, WantErr: `unknown language "ruby"`},
		{Args: []string{"--lang", "python", "-c", "1", "extra"}, WantErr: `unexpected argument "extra"`},
		{Args: []string{"--lang", "python", "-c", "1", "--max-output", "0"}, WantErr: "--max-output"},
		{Args: []string{"--lang", "python", "-c", "1", "--timeout", "-1s"}, WantErr: "negative"},
		{Args: []string{"-n", "Bad Name", "--lang", "python", "-c", "1"}, WantErr: "name"},
	})
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
