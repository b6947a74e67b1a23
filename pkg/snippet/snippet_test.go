package snippet

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/internal/scripttest"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestNewPlan(t *testing.T) {
	for _, tt := range []struct {
		lang, code, file, main, wantErr string
	}{
		{lang: "python", code: "print(1)", file: "main.py"},
		{lang: "bash", code: "echo", file: "main.sh"},
		{lang: "sh", code: "echo", file: "main.sh"},
		{lang: "node", code: "1", file: "main.js"},
		{lang: "go", code: "package main", file: "main.go"},
		{lang: "java", code: "public class Hello { public static void main(String[] a) {} }", file: "Hello.java", main: "Hello"},
		{lang: "java", code: "class A {}\nfinal public class B {}\nclass C {}", file: "B.java", main: "B"},
		{lang: "java", code: "// no public class\nclass First {}\nclass Second {}", file: "First.java", main: "First"},
		{lang: "java", code: "class A {} public class Hello$1 {}", file: "Hello$1.java", main: "Hello$1"},
		{lang: "java", code: "int x = 1;", wantErr: "no class found"},
		{lang: "ruby", code: "puts 1", wantErr: `unknown language "ruby"`},
		{lang: "python", code: strings.Repeat("x", MaxCodeSize+1), wantErr: "more than"},
	} {
		plan, err := NewPlan(tt.lang, []byte(tt.code))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errs.ExitCode(err) != errs.CodeUsage {
				t.Errorf("%s %.20q: %v, want %q", tt.lang, tt.code, err, tt.wantErr)
			}
			continue
		}
		if err != nil || plan.File != tt.file || plan.Main != tt.main || plan.Language.Name != tt.lang {
			t.Errorf("%s %.30q: %+v %v", tt.lang, tt.code, plan, err)
		}
	}
}

func TestLanguages(t *testing.T) {
	if got := strings.Join(Languages(), " "); got != "python bash sh node go java" {
		t.Errorf("languages: %s", got)
	}
	for file, want := range map[string]string{"x.py": "python", "a/b.sh": "bash", "s.js": "node", "m.go": "go", "Hello.java": "java", "x.rb": ""} {
		if got, _ := ForFile(file); got != want {
			t.Errorf("%s: %q, want %q", file, got, want)
		}
	}
	for _, l := range languages {
		if l.Profile != "sandbox" && l.Profile != "common" {
			t.Errorf("%s: profile %q", l.Name, l.Profile)
		}
	}
}

func TestMissingToolError(t *testing.T) {
	node, _ := Lookup("node")
	err := &MissingToolError{Language: node, Image: "sbx-sandbox:x"}
	if errs.ExitCode(err) != errs.CodeNotFound || !strings.Contains(err.Error(), "needs node, which image sbx-sandbox:x") ||
		!strings.Contains(errs.Hint(err), "profile: common") {
		t.Errorf("%v / %s", err, errs.Hint(err))
	}
}

func TestPrefixSniffer(t *testing.T) {
	prefix := "sbx-run: missing node /tmp/sbx-run/1\n"
	for _, tt := range []struct {
		name    string
		writes  []string
		matched bool
		out     string
	}{
		{"the marker in pieces", []string{"sbx-run: ", "missing node /tmp/sbx-run/1\n"}, true, ""},
		{"ordinary output passes", []string{"Traceback\n", "more"}, false, "Traceback\nmore"},
		{"a prefix of the marker, then more", []string{"sbx-run: missing node /tmp/sbx-run/1\nand more"}, false, prefix + "and more"},
		{"a partial marker at the end", []string{"sbx-run: miss"}, false, "sbx-run: miss"},
		{"nothing", nil, false, ""},
	} {
		var b bytes.Buffer
		s := &prefixSniffer{w: &b, prefix: []byte(prefix)}
		for _, w := range tt.writes {
			if n, err := s.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("%s: write: %d %v", tt.name, n, err)
			}
		}
		if s.matched() != tt.matched {
			t.Errorf("%s: matched %v", tt.name, s.matched())
		}
		if !tt.matched {
			if err := s.flush(); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.out {
				t.Errorf("%s: passed %q, want %q", tt.name, b.String(), tt.out)
			}
		}
	}
}

func TestPlanRunJavaIgnoresCommentsAndStrings(t *testing.T) {
	code := `/* public class Wrong {} */
// public class AlsoWrong
class Helper { String s = "public class NotThis"; char c = '"'; }
public class Right { public static void main(String[] a) {} }`
	if plan, err := NewPlan("java", []byte(code)); err != nil || plan.Main != "Right" {
		t.Errorf("%+v %v", plan, err)
	}
}

func TestScriptsAreEmbedded(t *testing.T) { scripttest.CheckEmbedded(t) }
