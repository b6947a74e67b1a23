package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// envItem, ulimitItem and bindItem are single elements of the map and list kinds, kept in the
// order they were written so each carries its own source line.
type envItem struct {
	Name, Value string
}

type ulimitItem struct {
	Name string
	Ulimit
}

type bindItem struct {
	Spec string // as written, for messages
	Bind        // Source as written; Resolve canonicalises it
}

// ParseSize parses a size such as 512m, 2g, 1.5G, 64MiB or a plain number of bytes. Units are
// powers of 1024, as Docker's are.
func ParseSize(s string) (int64, error) {
	number, unit, ok := sizeParts(strings.TrimSpace(s))
	if !ok {
		return 0, fmt.Errorf("%q is not a size such as 512m or 2g", s)
	}
	n, err := strconv.ParseFloat(number, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size such as 512m or 2g", s)
	}
	mult := map[string]float64{"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[unit]
	v := n * mult
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(math.Round(v)), nil
}

// FormatSize renders bytes in the largest unit that divides them exactly: 1073741824 -> 1g.
func FormatSize(b int64) string {
	if b == 0 {
		return "0"
	}
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"t", 1 << 40}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}} {
		if b%u.n == 0 {
			return strconv.FormatInt(b/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(b, 10)
}

// parseDuration accepts Go durations (30s, 10m, 1h30m) and 0.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 30s, 10m or 1h (0 means none)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return d, nil
}

// FormatDuration renders d without trailing zero units: 10m, 1h, 1h30m, 0.
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// parseScalarText parses the text of an environment variable or flag for a scalar key.
func parseScalarText(k *keyDef, s string) (any, error) {
	switch k.kind {
	case kString:
		return s, nil
	case kBool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", s)
		}
		return b, nil
	case kInt:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", s)
		}
		return n, nil
	case kFloat:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%q is not a number", s)
		}
		return f, nil
	case kSize:
		return ParseSize(s)
	case kDuration:
		return parseDuration(s)
	}
	return nil, fmt.Errorf("%s is a list and cannot be set from text", k.name)
}

// parseItemText parses one element of a list or map key written as text (a flag value).
func parseItemText(k *keyDef, s string) (any, error) {
	switch k.kind {
	case kStrings:
		return s, nil
	case kEnv:
		name, value, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q is not NAME=VALUE (to pass a host variable to execs, use passEnv)", s)
		}
		return envItem{Name: name, Value: value}, nil
	case kUlimits:
		name, value, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q is not NAME=SOFT:HARD", s)
		}
		u, err := parseUlimit(value)
		if err != nil {
			return nil, err
		}
		return ulimitItem{Name: name, Ulimit: u}, nil
	case kTmpfs:
		path, opts, _ := strings.Cut(s, ":")
		return newTmpfs(path, splitOptions(opts)), nil
	case kBinds:
		return parseBind(s)
	}
	return nil, fmt.Errorf("%s is not a list", k.name)
}

func parseUlimit(s string) (Ulimit, error) {
	soft, hard, pair := strings.Cut(strings.TrimSpace(s), ":")
	if !pair {
		hard = soft
	}
	sv, err1 := strconv.ParseInt(soft, 10, 64)
	hv, err2 := strconv.ParseInt(hard, 10, 64)
	if err1 != nil || err2 != nil || sv < 0 || hv < 0 {
		return Ulimit{}, fmt.Errorf("%q is not SOFT:HARD or a single number (both non-negative)", s)
	}
	return Ulimit{Soft: sv, Hard: hv}, nil
}

func splitOptions(s string) []string {
	var out []string
	for o := range strings.SplitSeq(s, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// newTmpfs fills in the safe options a tmpfs entry leaves out: nosuid and nodev always, and
// noexec unless exec is asked for. suid and dev are kept so validation can refuse them.
func newTmpfs(path string, opts []string) Tmpfs {
	has := func(o string) bool { return slices.Contains(opts, o) }
	out := slices.Clone(opts)
	if !has("suid") && !has("nosuid") {
		out = append(out, "nosuid")
	}
	if !has("dev") && !has("nodev") {
		out = append(out, "nodev")
	}
	if !has("exec") && !has("noexec") {
		out = append(out, "noexec")
	}
	return Tmpfs{Path: path, Options: out}
}

// parseBind parses HOST:CONTAINER[:ro|:rw]; read-write when no mode is given, as Docker does.
func parseBind(s string) (bindItem, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return bindItem{}, fmt.Errorf("%q is not HOST:CONTAINER[:ro]", s)
	}
	b := bindItem{Spec: s, Bind: Bind{Source: parts[0], Target: parts[1]}}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			b.ReadOnly = true
		case "rw":
		default:
			return bindItem{}, fmt.Errorf("%q: mode %q is not ro or rw (propagation and relabelling options are not supported)", s, parts[2])
		}
	}
	return b, nil
}

// formatValue renders the value behind a Config field pointer for explain and the template.
func formatValue(k *keyDef, ptr any) string {
	switch v := ptr.(type) {
	case *string:
		return *v
	case *bool:
		return strconv.FormatBool(*v)
	case *int:
		return strconv.Itoa(*v)
	case *int64:
		if k.kind == kSize {
			return FormatSize(*v)
		}
		return strconv.FormatInt(*v, 10)
	case *float64:
		return strconv.FormatFloat(*v, 'f', -1, 64)
	case *time.Duration:
		return FormatDuration(*v)
	case *[]string:
		return "[" + strings.Join(*v, ", ") + "]"
	case *map[string]string:
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(*v)) {
			parts = append(parts, name+"="+(*v)[name])
		}
		return strings.Join(parts, ", ")
	case *map[string]Ulimit:
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(*v)) {
			parts = append(parts, name+"="+(*v)[name].String())
		}
		return strings.Join(parts, ", ")
	case *[]Tmpfs:
		var parts []string
		for _, t := range *v {
			parts = append(parts, t.String())
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *[]Bind:
		var parts []string
		for _, b := range *v {
			parts = append(parts, b.String())
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(ptr)
}

// String renders the tmpfs entry as PATH:OPTIONS.
func (t Tmpfs) String() string {
	if len(t.Options) == 0 {
		return t.Path
	}
	return t.Path + ":" + strings.Join(t.Options, ",")
}

// String renders the bind as HOST:CONTAINER[:ro].
func (b Bind) String() string {
	s := b.Source + ":" + b.Target
	if b.ReadOnly {
		s += ":ro"
	}
	return s
}

// String renders the limit as SOFT:HARD.
func (u Ulimit) String() string { return fmt.Sprintf("%d:%d", u.Soft, u.Hard) }
