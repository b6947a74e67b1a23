package config

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

func TestMatchersAgreeWithTheirExpressions(t *testing.T) {
	size := regexp.MustCompile(`(?i)^([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?b)?$`)
	for _, tt := range []struct {
		expr     string
		alphabet string
		match    func(string) bool
	}{
		{namePattern, "az09_.-A/ é", isName},
		{`^[0-9]+$`, "09a -", isNumeric},
		{`^[A-Za-z_][A-Za-z0-9_]*$`, "aZ09_-. =", isEnvName},
		{`^[A-Za-z0-9][A-Za-z0-9_.-]*$`, "aZ09_.-/ :", isNetName},
		{size.String(), "09.kmgtKMGTiIbBx \t\n", func(s string) bool { _, _, ok := sizeParts(s); return ok }},
	} {
		re := regexp.MustCompile(tt.expr)
		rng := rand.New(rand.NewPCG(1, uint64(len(tt.expr))))
		cases := []string{"", strings.Repeat("a", 63), strings.Repeat("a", 64), "1.", ".5", "1.5 GiB", "2g", "64MiB", "7 b", "1ib"}
		for range 200000 {
			b := make([]byte, rng.IntN(9))
			for i := range b {
				b[i] = tt.alphabet[rng.IntN(len(tt.alphabet))]
			}
			cases = append(cases, string(b))
		}
		for _, s := range cases {
			if got, want := tt.match(s), re.MatchString(s); got != want {
				t.Errorf("%s: %q: matcher %v, expression %v", tt.expr, s, got, want)
			}
		}
	}
	for _, s := range []string{"512", "512m", "1.5G", "64MiB", "2 kb", "3T"} {
		m := size.FindStringSubmatch(s)
		number, unit, _ := sizeParts(s)
		if number != m[1] || unit != strings.ToLower(m[2]) {
			t.Errorf("%q: sizeParts %q %q, expression %q %q", s, number, unit, m[1], m[2])
		}
	}
}
