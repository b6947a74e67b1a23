package cmd

import (
	"slices"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

// The table newCmdRoot picks one command from must name each command as cobra would find it.
func TestSubcommandNames(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
	for _, c := range subcommands {
		cmd := c.build(f)
		if want := append([]string{cmd.Name()}, cmd.Aliases...); !slices.Equal(c.names, want) {
			t.Errorf("subcommands lists %v, the command answers to %v", c.names, want)
		}
		root := newCmdRoot(f, c.names[0])
		if got := root.Commands(); len(got) != 1 || got[0].Name() != cmd.Name() {
			t.Errorf("newCmdRoot(%q) has %d commands, want %s alone", c.names[0], len(got), cmd.Name())
		}
	}
	for _, first := range []string{"", "--debug", "help", "completion", "__complete", "exce"} {
		if got := len(newCmdRoot(f, first).Commands()); got < len(subcommands) {
			t.Errorf("newCmdRoot(%q) has %d commands, want all %d", first, got, len(subcommands))
		}
	}
}
