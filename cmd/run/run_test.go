package run

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil/cmdtest"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/snippet"
)

func TestNewCmdRunFlags(t *testing.T) {
	cmdtest.Flags(t, NewCmdRun, []cmdtest.FlagCase[RunOptions]{
		{Args: []string{"--lang", "python", "-c", "print(1)"}, Check: func(o *RunOptions) bool {
			return o.Lang == "python" && o.Code == "print(1)" && o.CodeSet && !o.Stdin && o.File == "" && o.MaxOutput == snippet.DefaultMaxOutput && !o.TimeoutSet && !o.JSON
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

func TestRunRun(t *testing.T) {
	e := cmdtest.WithRunning(t, "web")
	e.AnswerInTurn(t, enginetest.Answer{Stdout: strings.NewReader("2\n")})
	err := runRun(context.Background(), &RunOptions{IO: e.IO, Factory: e.F, Name: "web", Lang: "python", Code: "print(1+1)", CodeSet: true, MaxOutput: snippet.DefaultMaxOutput})
	if err != nil || e.Out.String() != "2\n" || e.Err.Len() != 0 {
		t.Errorf("err %v, stdout %q, stderr %q", err, e.Out, e.Err)
	}

	// --json reports the output and the exit code, which is also sbx's.
	e = cmdtest.WithRunning(t, "web")
	e.AnswerInTurn(t, enginetest.Answer{Stdout: strings.NewReader("out\n"), Stderr: strings.NewReader("err\n"), Code: 3})
	err = runRun(context.Background(), &RunOptions{IO: e.IO, Factory: e.F, Name: "web", Lang: "bash", Code: "exit 3", CodeSet: true, MaxOutput: snippet.DefaultMaxOutput, JSON: true})
	var res Result
	if jerr := json.Unmarshal(e.Out.Bytes(), &res); jerr != nil || res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 3 || res.Truncated {
		t.Errorf("%v: %s", jerr, e.Out)
	}
	if errs.ExitCode(err) != 3 || err.Error() != "exit status 3" {
		t.Errorf("err %v (exit %d)", err, errs.ExitCode(err))
	}
}

// Output past --max-output is cut, said so in the stream and, with a hint, on stderr.
func TestRunRunTruncates(t *testing.T) {
	e := cmdtest.WithRunning(t, "web")
	e.AnswerInTurn(t, enginetest.Answer{Stdout: strings.NewReader("123456789")})
	err := runRun(context.Background(), &RunOptions{IO: e.IO, Factory: e.F, Name: "web", Lang: "bash", Code: "seq", CodeSet: true, MaxOutput: 4})
	if err != nil || !strings.HasPrefix(e.Out.String(), "1234\n[sbx: stdout truncated after 4 bytes; 5 more bytes dropped]") {
		t.Errorf("err %v, stdout %q", err, e.Out)
	}
	if !strings.Contains(e.Err.String(), "warning: output truncated at 4 bytes per stream (stdout 9 bytes") || !strings.Contains(e.Err.String(), "hint: raise --max-output") {
		t.Errorf("stderr %q", e.Err)
	}
}

// A config that runs this sandbox's commands on the host is refused before the engine is
// dialled: run needs a sandbox.
func TestRunRunRefusesHostMode(t *testing.T) {
	e := cmdtest.NewEnv(t, nil)
	e.Vars["SBX_MODE"] = "off"
	err := runRun(context.Background(), &RunOptions{IO: e.IO, Factory: e.F, Lang: "bash", Code: "true", CodeSet: true})
	if err == nil || !strings.Contains(err.Error(), "this needs a sandbox, but mode off (from env:SBX_MODE)") || errs.ExitCode(err) != errs.CodeFailure ||
		!strings.Contains(errs.Hint(err), "set mode: all") {
		t.Errorf("err %v (exit %d, hint %q)", err, errs.ExitCode(err), errs.Hint(err))
	}
}
