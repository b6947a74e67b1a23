// Package snippet owns "sbx run" and the MCP run_code tool: the languages a snippet may be in,
// how one is saved in a sandbox and handed to its interpreter, and the caps on what it prints.
// Of the lifecycle it needs one thing, a command run in a started sandbox (Execer); it knows
// nothing else of sandboxes, and pkg/sandbox knows nothing of it.
package snippet

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/internal/lazyre"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// Dir is where "sbx run" saves a snippet inside the sandbox, one directory per run. /tmp is
// noexec, so snippets are always handed to their interpreter, never executed themselves.
const Dir = "/tmp/sbx-run"

// DefaultMaxOutput is how much of each output stream a run keeps unless told otherwise.
const DefaultMaxOutput = 1 << 20

// MaxCodeSize bounds a snippet, as it does a shell session's script: it is streamed, but a
// larger one is surely a mistake.
const MaxCodeSize = sandbox.MaxCodeSize

// runScript saves a snippet in the sandbox, runs it and removes it: see
// scripts/run_snippet.sh. A missing interpreter is reported with runMissing and the run's
// random directory, which Run recognises and no snippet prints by accident.
//
//go:embed scripts/run_snippet.sh
var runScript string

// runCleanup removes the directory of a run that was killed: see scripts/run_cleanup.sh.
//
//go:embed scripts/run_cleanup.sh
var runCleanup string

// runMissing starts the line runScript prints when the language's tool is not installed.
const runMissing = "sbx-run: missing "

// Language is how "sbx run" runs one language.
type Language struct {
	Name string
	// Tool must be on PATH in the image.
	Tool string
	// Ext is the file extension (".py"); Java's file is named after its class.
	Ext string
	// Command is a shell fragment run with $d (the run's directory), $f (the file) and $m
	// (Java's main class) set.
	Command string
	// Profile is the bundled profile whose image has Tool.
	Profile string
}

var languages = []Language{
	{Name: "python", Tool: "python3", Ext: ".py", Command: `python3 "$f"`, Profile: "sandbox"},
	{Name: "bash", Tool: "bash", Ext: ".sh", Command: `bash "$f"`, Profile: "sandbox"},
	{Name: "sh", Tool: "sh", Ext: ".sh", Command: `sh "$f"`, Profile: "sandbox"},
	{Name: "node", Tool: "node", Ext: ".js", Command: `node "$f"`, Profile: "common"},
	// go run builds in GOTMPDIR, which must allow exec (/tmp does not); the common profile
	// points it at its home tmpfs.
	{Name: "go", Tool: "go", Ext: ".go", Command: `go run "$f"`, Profile: "common"},
	{Name: "java", Tool: "javac", Ext: ".java", Command: `javac -d "$d" "$f" && java -cp "$d" "$m"`, Profile: "common"},
}

// Languages lists the languages "sbx run" knows.
func Languages() []string {
	out := make([]string, len(languages))
	for i, l := range languages {
		out[i] = l.Name
	}
	return out
}

// Lookup returns the language named name.
func Lookup(name string) (Language, bool) {
	i := slices.IndexFunc(languages, func(l Language) bool { return l.Name == name })
	if i < 0 {
		return Language{}, false
	}
	return languages[i], true
}

// ForFile guesses a snippet file's language from its extension (".sh" is bash).
func ForFile(name string) (string, bool) {
	for _, l := range languages {
		if strings.HasSuffix(name, l.Ext) {
			return l.Name, true
		}
	}
	return "", false
}

// Plan is how one snippet is saved and run.
type Plan struct {
	Language Language
	File     string // base name inside the run's directory
	Main     string // Java's main class
}

// javaNoise matches Java's string and character literals and comments, which are blanked
// before looking for classes.
var javaNoise = lazyre.New(`"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|//[^\n]*|/\*(?s:.*?)\*/`)

var javaClass = lazyre.New(`\b((?:(?:public|final|abstract|static|strictfp|sealed)\s+)*)class\s+([A-Za-z_$][A-Za-z0-9_$]*)`)

// NewPlan checks a snippet and picks its file name. Java's file is named after the public
// class, else the first class, which is also the class run.
func NewPlan(lang string, code []byte) (Plan, error) {
	l, ok := Lookup(lang)
	if !ok {
		return Plan{}, errs.Usagef("unknown language %q", lang).WithHint("use one of " + strings.Join(Languages(), ", "))
	}
	if len(code) > MaxCodeSize {
		return Plan{}, errs.Usagef("the code is %d bytes, more than the %d sbx run accepts", len(code), MaxCodeSize)
	}
	plan := Plan{Language: l, File: "main" + l.Ext}
	if l.Name == "java" {
		main := ""
		for _, m := range javaClass().FindAllSubmatch(javaNoise().ReplaceAll(code, []byte(" ")), -1) {
			if main == "" || strings.Contains(string(m[1]), "public") {
				main = string(m[2])
			}
			if strings.Contains(string(m[1]), "public") {
				break
			}
		}
		if main == "" {
			return Plan{}, errs.Usagef("no class found in the Java code").
				WithHint("declare one with a main method, e.g. public class Main { public static void main(String[] args) { ... } }")
		}
		plan.File, plan.Main = main+".java", main
	}
	return plan, nil
}

// Options describe one snippet run.
type Options struct {
	Lang    string
	Code    []byte
	Env     []string
	WorkDir string
	User    string
	Timeout time.Duration
	// MaxOutput is how many bytes of each stream reach Stdout and Stderr; the rest is counted
	// and dropped, and a marker says so. 0 means DefaultMaxOutput.
	MaxOutput int64
	Stdout    io.Writer
	Stderr    io.Writer
}

// Result is how a snippet run ended.
type Result struct {
	sandbox.ExecResult
	StdoutBytes, StderrBytes         int64 // produced, including what was dropped
	StdoutTruncated, StderrTruncated bool
}

// Truncated reports whether either stream was cut at MaxOutput.
func (r *Result) Truncated() bool { return r.StdoutTruncated || r.StderrTruncated }

// MissingToolError is a language whose interpreter the sandbox's image lacks.
type MissingToolError struct {
	Language Language
	Image    string
}

func (e *MissingToolError) Error() string {
	return fmt.Sprintf("language %s needs %s, which image %s does not have", e.Language.Name, e.Language.Tool, e.Image)
}

// ExitCode is 127, as for any command that is not found.
func (e *MissingToolError) ExitCode() int { return errs.CodeNotFound }

// Hint names the profile that has the tool.
func (e *MissingToolError) Hint() string {
	if e.Language.Profile == "sandbox" {
		return "use an image that has " + e.Language.Tool + ", such as the bundled sbx-sandbox"
	}
	return fmt.Sprintf("%s needs the %s profile: set profile: %s in .sbx.yaml or SBX_PROFILE=%s, or use a sandbox created with --profile %s",
		e.Language.Name, e.Language.Profile, e.Language.Profile, e.Language.Profile, e.Language.Profile)
}

// Execer runs a command in a started sandbox: *sandbox.Manager.
type Execer interface {
	Exec(ctx context.Context, sb *sandbox.Sandbox, opts sandbox.ExecOptions) (*sandbox.ExecResult, error)
}

// Run saves opts.Code in the running sandbox sb, runs it with its language's interpreter and
// removes it. Output goes to opts.Stdout and opts.Stderr as it comes, each cut at MaxOutput
// with a marker line after the cut.
func Run(ctx context.Context, x Execer, sb *sandbox.Sandbox, opts Options) (*Result, error) {
	plan, err := NewPlan(opts.Lang, opts.Code)
	if err != nil {
		return nil, err
	}
	limit := opts.MaxOutput
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	stdout := &sandbox.CapWriter{W: sandbox.OrDiscard(opts.Stdout), Limit: limit}
	stderr := &sandbox.CapWriter{W: sandbox.OrDiscard(opts.Stderr), Limit: limit}
	// Random, so that a snippet cannot guess it and print the missing-tool line of another.
	dir := Dir + "/" + sandbox.RandomID()
	sniff := &prefixSniffer{w: stderr, prefix: []byte(runMissing + plan.Language.Tool + " " + dir + "\n")}
	res, err := x.Exec(ctx, sb, sandbox.ExecOptions{
		Cmd: sb.Script(runScript, "sbx-run", dir, plan.File, plan.Language.Tool, plan.Main, plan.Language.Command),
		Env: opts.Env, WorkDir: opts.WorkDir, User: opts.User, Timeout: opts.Timeout,
		Interactive: true, Stdin: bytes.NewReader(opts.Code), Stdout: stdout, Stderr: sniff,
	})
	if err != nil {
		return nil, err
	}
	if sniff.matched() && res.ExitCode == errs.CodeNotFound {
		return nil, &MissingToolError{Language: plan.Language, Image: sb.Image}
	}
	if err := sniff.flush(); err != nil {
		return nil, err
	}
	if res.TimedOut || res.Canceled || res.ExitCode >= 128 {
		// The script was killed before it could clean up after itself.
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, _ = x.Exec(bg, sb, sandbox.ExecOptions{Cmd: sb.Script(runCleanup, "sbx-run", dir),
			Stdout: io.Discard, Stderr: io.Discard, Timeout: time.Minute})
		cancel()
	}
	out := &Result{ExecResult: *res, StdoutBytes: stdout.Written(), StderrBytes: stderr.Written(),
		StdoutTruncated: stdout.Truncated(), StderrTruncated: stderr.Truncated()}
	for _, s := range []struct {
		name string
		w    *sandbox.CapWriter
	}{{"stdout", stdout}, {"stderr", stderr}} {
		if s.w.Truncated() {
			fmt.Fprintf(s.w.W, "\n[sbx: %s truncated after %d bytes; %d more bytes dropped]\n", s.name, s.w.Limit, s.w.Written()-s.w.Limit)
		}
	}
	return out, nil
}

// prefixSniffer holds output back while it could still be exactly prefix, so a message of
// sbx's own can be recognised before anything reaches the user; flush releases it.
type prefixSniffer struct {
	w      io.Writer
	prefix []byte
	held   []byte
	passed bool
}

func (s *prefixSniffer) Write(p []byte) (int, error) {
	if s.passed {
		return s.w.Write(p)
	}
	s.held = append(s.held, p...)
	if len(s.held) <= len(s.prefix) && bytes.HasPrefix(s.prefix, s.held) {
		return len(p), nil
	}
	if err := s.flush(); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *prefixSniffer) matched() bool { return !s.passed && bytes.Equal(s.held, s.prefix) }

func (s *prefixSniffer) flush() error {
	s.passed = true
	held := s.held
	s.held = nil
	if len(held) == 0 {
		return nil
	}
	_, err := s.w.Write(held)
	return err
}
