package sandbox

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
)

// RunDir is where "sbx run" saves a snippet inside the sandbox, one directory per run. /tmp is
// noexec, so snippets are always handed to their interpreter, never executed themselves.
const RunDir = "/tmp/sbx-run"

// DefaultMaxOutput is how much of each output stream a run keeps unless told otherwise.
const DefaultMaxOutput = 1 << 20

// MaxCodeSize bounds a snippet: it is streamed, but a larger one is surely a mistake.
const MaxCodeSize = 16 << 20

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

// LookupLanguage returns the language named name.
func LookupLanguage(name string) (Language, bool) {
	i := slices.IndexFunc(languages, func(l Language) bool { return l.Name == name })
	if i < 0 {
		return Language{}, false
	}
	return languages[i], true
}

// LanguageForFile guesses a snippet file's language from its extension (".sh" is bash).
func LanguageForFile(name string) (string, bool) {
	for _, l := range languages {
		if strings.HasSuffix(name, l.Ext) {
			return l.Name, true
		}
	}
	return "", false
}

// RunPlan is how one snippet is saved and run.
type RunPlan struct {
	Language Language
	File     string // base name inside the run's directory
	Main     string // Java's main class
}

// javaNoise matches Java's string and character literals and comments, which are blanked
// before looking for classes.
var javaNoise = lazyre.New(`"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|//[^\n]*|/\*(?s:.*?)\*/`)

var javaClass = lazyre.New(`\b((?:(?:public|final|abstract|static|strictfp|sealed)\s+)*)class\s+([A-Za-z_$][A-Za-z0-9_$]*)`)

// PlanRun checks a snippet and picks its file name. Java's file is named after the public
// class, else the first class, which is also the class run.
func PlanRun(lang string, code []byte) (RunPlan, error) {
	l, ok := LookupLanguage(lang)
	if !ok {
		return RunPlan{}, errs.Usagef("unknown language %q", lang).WithHint("use one of " + strings.Join(Languages(), ", "))
	}
	if len(code) > MaxCodeSize {
		return RunPlan{}, errs.Usagef("the code is %d bytes, more than the %d sbx run accepts", len(code), MaxCodeSize)
	}
	plan := RunPlan{Language: l, File: "main" + l.Ext}
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
			return RunPlan{}, errs.Usagef("no class found in the Java code").
				WithHint("declare one with a main method, e.g. public class Main { public static void main(String[] args) { ... } }")
		}
		plan.File, plan.Main = main+".java", main
	}
	return plan, nil
}

// RunOptions describe one snippet run.
type RunOptions struct {
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

// RunResult is how a snippet run ended.
type RunResult struct {
	ExecResult
	StdoutBytes, StderrBytes         int64 // produced, including what was dropped
	StdoutTruncated, StderrTruncated bool
}

// Truncated reports whether either stream was cut at MaxOutput.
func (r *RunResult) Truncated() bool { return r.StdoutTruncated || r.StderrTruncated }

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

// Run saves opts.Code in the running sandbox sb, runs it with its language's interpreter and
// removes it. Output goes to opts.Stdout and opts.Stderr as it comes, each cut at MaxOutput
// with a marker line after the cut.
func (m *Manager) Run(ctx context.Context, sb *Sandbox, opts RunOptions) (*RunResult, error) {
	plan, err := PlanRun(opts.Lang, opts.Code)
	if err != nil {
		return nil, err
	}
	limit := opts.MaxOutput
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	stdout := &CapWriter{W: orDiscard(opts.Stdout), Limit: limit}
	stderr := &CapWriter{W: orDiscard(opts.Stderr), Limit: limit}
	dir := RunDir + "/" + newExecID()
	sniff := &prefixSniffer{w: stderr, prefix: []byte(runMissing + plan.Language.Tool + " " + dir + "\n")}
	res, err := m.Exec(ctx, sb, ExecOptions{
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
		_, _ = m.script(bg, sb, scriptRun{script: runCleanup, args: []string{dir}})
		cancel()
	}
	out := &RunResult{ExecResult: *res, StdoutBytes: stdout.Written(), StderrBytes: stderr.Written(),
		StdoutTruncated: stdout.Truncated(), StderrTruncated: stderr.Truncated()}
	for _, s := range []struct {
		name string
		w    *CapWriter
	}{{"stdout", stdout}, {"stderr", stderr}} {
		if s.w.Truncated() {
			fmt.Fprintf(s.w.W, "\n[sbx: %s truncated after %d bytes; %d more bytes dropped]\n", s.name, s.w.Limit, s.w.Written()-s.w.Limit)
		}
	}
	return out, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// CapWriter passes the first Limit bytes written to it on to W and counts the rest.
type CapWriter struct {
	W     io.Writer
	Limit int64
	n     int64
}

func (c *CapWriter) Write(p []byte) (int, error) {
	keep := p
	if room := c.Limit - c.n; int64(len(p)) > room {
		keep = p[:max(room, 0)]
	}
	c.n += int64(len(p))
	if len(keep) > 0 {
		if _, err := c.W.Write(keep); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Written counts every byte written, kept or not.
func (c *CapWriter) Written() int64 { return c.n }

// Truncated reports whether bytes were dropped.
func (c *CapWriter) Truncated() bool { return c.n > c.Limit }

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
