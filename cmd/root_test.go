package cmd

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

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

// sbx --help shows every command a user may type under one of its headings, in their order;
// hidden ones (sbx's own helpers) under none.
func TestHelpGroupsEveryCommand(t *testing.T) {
	ios, _, stdout, _ := iostreams.Test()
	f := cmdutil.TestFactory(ios, nil, t.TempDir(), t.TempDir(), time.Now(), nil)
	for _, c := range subcommands {
		cmd := c.build(f)
		if cmd.Hidden != (c.group == "") {
			t.Errorf("%s: hidden %v, group %q", cmd.Name(), cmd.Hidden, c.group)
		}
		if c.group != "" && !slices.ContainsFunc(commandGroups, func(g *cobra.Group) bool { return g.ID == c.group }) {
			t.Errorf("%s: no group %q", cmd.Name(), c.group)
		}
	}
	root := newCmdRoot(f, "")
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	help, at := stdout.String(), 0
	for _, g := range commandGroups {
		i := strings.Index(help, "\n"+g.Title+"\n")
		if i < at {
			t.Errorf("heading %q missing or out of order in:\n%s", g.Title, help)
		}
		at = i
	}
	if strings.Contains(help, "Additional Commands") {
		t.Errorf("commands outside the headings:\n%s", help)
	}
}
