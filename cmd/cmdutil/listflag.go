package cmdutil

import (
	"strings"

	"github.com/spf13/pflag"
)

// ListVarP adds a repeatable string flag collecting its values into p, as pflag's
// StringArrayVarP does but without its cost at every start: pflag formats a StringArray's
// default through encoding/csv, with a 4 KiB buffer, for each of the many such flags every
// sbx process adds to its commands.
func ListVarP(fs *pflag.FlagSet, p *[]string, name, shorthand, usage string) {
	fs.VarP((*listValue)(p), name, shorthand, usage)
}

type listValue []string

func (l *listValue) Set(v string) error { *l = append(*l, v); return nil }

// Type names the flag's values in --help where its usage names none, as pflag's does.
func (l *listValue) Type() string { return "stringArray" }

// String is empty when no value was given, so --help shows no default.
func (l *listValue) String() string {
	if len(*l) == 0 {
		return ""
	}
	return "[" + strings.Join(*l, ",") + "]"
}
