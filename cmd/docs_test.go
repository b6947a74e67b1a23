package cmd

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
)

// docPages are README.md and every page under docs/, as paths from this directory.
func docPages(t *testing.T) []string {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages under docs/: %v", err)
	}
	return append([]string{"../README.md"}, pages...)
}

// block is a fenced code block of a page: its language and lines.
type block struct {
	lang  string
	line  int // of its first line, from 1
	lines []string
}

// readPage returns a page's text outside code blocks (with code lines blanked, so line
// numbers stay) and its code blocks.
func readPage(t *testing.T, path string) (prose []string, blocks []block) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cur *block
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &block{lang: strings.TrimPrefix(l, "```"), line: i + 2}
			prose = append(prose, "")
		case cur != nil && strings.HasPrefix(l, "```"):
			blocks = append(blocks, *cur)
			cur = nil
			prose = append(prose, "")
		case cur != nil:
			cur.lines = append(cur.lines, l)
			prose = append(prose, "")
		default:
			prose = append(prose, l)
		}
	}
	if cur != nil {
		t.Errorf("%s: a code block from line %d never ends", path, cur.line-1)
	}
	return prose, blocks
}

var (
	headingRe = regexp.MustCompile(`^#+ (.*)$`)
	linkRe    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	slugDrop  = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// anchors are the anchors GitHub gives a page's headings.
func anchors(prose []string) map[string]bool {
	out := map[string]bool{}
	for _, l := range prose {
		if m := headingRe.FindStringSubmatch(l); m != nil {
			base := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
			slug := base
			for n := 1; out[slug]; n++ { // a repeated heading gets -1, -2...
				slug = base + "-" + strconv.Itoa(n)
			}
			out[slug] = true
		}
	}
	return out
}

// Every link of the pages goes to a file that exists and, with #ANCHOR, to a heading there.
func TestDocsLinks(t *testing.T) {
	pages := docPages(t)
	heads := map[string]map[string]bool{}
	prose := map[string][]string{}
	for _, p := range pages {
		prose[p], _ = readPage(t, p)
		heads[filepath.Clean(p)] = anchors(prose[p])
	}
	for _, p := range pages {
		for i, l := range prose[p] {
			for _, m := range linkRe.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := filepath.Clean(p)
				if file != "" {
					path = filepath.Join(filepath.Dir(p), file)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %s: %v", p, i+1, target, err)
					continue
				}
				if anchor != "" && strings.HasSuffix(path, ".md") && !heads[path][anchor] {
					t.Errorf("%s:%d: link %s: no heading with that anchor in %s", p, i+1, target, path)
				}
			}
		}
	}
}

// shellWords splits a command line as sh would for these examples: quotes, backslashes,
// and the end of the command at an unquoted comment, pipe, list or redirection.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord, quote := false, byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case strings.IndexByte("#|;&><", c) >= 0 && !inWord:
			return words
		case strings.IndexByte("|;&><", c) >= 0:
			return append(words, cur.String())
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// sbxLines are the sbx command lines of a page's shell examples: in sh, bash, console
// ($ lines only) and untagged blocks, after any VAR=value prefix.
func sbxLines(blocks []block) (lines []string, at []int) {
	for _, b := range blocks {
		if !slices.Contains([]string{"", "sh", "bash", "console", "shell"}, b.lang) {
			continue
		}
		for i, l := range b.lines {
			l = strings.TrimSpace(l)
			if b.lang == "console" {
				var ok bool
				if l, ok = strings.CutPrefix(l, "$ "); !ok {
					continue
				}
			}
			words := shellWords(l)
			for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
				words = words[1:]
			}
			if len(words) > 0 && words[0] == "sbx" {
				lines = append(lines, strings.Join(words, "\x00"))
				at = append(at, b.line+i)
			}
		}
	}
	return lines, at
}

// Every sbx command line in the pages' examples names a command sbx has, with flags it takes.
func TestDocsCommands(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
	checked := 0
	for _, p := range docPages(t) {
		_, blocks := readPage(t, p)
		lines, at := sbxLines(blocks)
		for i, l := range lines {
			args := strings.Split(l, "\x00")[1:]
			root := NewCmdRoot(f)
			cmd, rest, err := root.Find(args)
			if err != nil {
				t.Errorf("%s:%d: sbx %s: %v", p, at[i], strings.Join(args, " "), err)
				continue
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Errorf("%s:%d: sbx %s: %v", p, at[i], strings.Join(args, " "), err)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Errorf("only %d sbx command lines found in the pages' examples", checked)
	}
}

// Every YAML example in the pages is a config sbx takes from your own --config file: no
// unknown key, no wrong type, nothing refused.
func TestDocsConfigExamples(t *testing.T) {
	checked := 0
	for _, p := range docPages(t) {
		_, blocks := readPage(t, p)
		for _, b := range blocks {
			if b.lang != "yaml" {
				continue
			}
			home, root := t.TempDir(), t.TempDir()
			file := filepath.Join(home, "example.yaml")
			if err := os.WriteFile(file, []byte(strings.Join(b.lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := config.Resolve(config.Inputs{
				Getenv:      func(string) string { return "" },
				HomeDir:     func() (string, error) { return home, nil },
				WorkingDir:  func() (string, error) { return root, nil },
				ConfigFile:  file,
				HostCPUs:    4,
				GitTopLevel: func(string) (string, bool) { return "", false },
			})
			switch {
			case err != nil:
				t.Errorf("%s:%d: %v", p, b.line, err)
			case len(r.Problems) > 0:
				t.Errorf("%s:%d: %v", p, b.line, r.Problems)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Error("no YAML example found in the pages")
	}
}
