package cmdutil

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

// Table is tabular command output: a lipgloss table on a terminal, tab-separated values when
// piped (no header styling, one row per line, so cut and awk work).
type Table struct {
	Headers []string
	Rows    [][]string
	// Color optionally colours a cell on a terminal; "" leaves it plain.
	Color func(row, col int) lipgloss.Color
}

// Print writes t to io.Out.
func (t Table) Print(io *iostreams.IOStreams) {
	if !io.IsStdoutTTY() {
		fmt.Fprintln(io.Out, strings.Join(t.Headers, "\t"))
		for _, r := range t.Rows {
			fmt.Fprintln(io.Out, strings.Join(r, "\t"))
		}
		return
	}
	header := lipgloss.NewStyle().Bold(io.ColorEnabled()).PaddingRight(2)
	cell := lipgloss.NewStyle().PaddingRight(2)
	lt := table.New().
		Border(lipgloss.HiddenBorder()).
		BorderTop(false).BorderBottom(false).BorderLeft(false).BorderRight(false).
		BorderColumn(false).BorderHeader(false).
		Headers(t.Headers...).
		Rows(t.Rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			if row == table.HeaderRow {
				return header
			}
			if t.Color != nil && io.ColorEnabled() {
				if c := t.Color(row, col); c != "" {
					return cell.Foreground(c)
				}
			}
			return cell
		})
	fmt.Fprintln(io.Out, strings.TrimRight(lt.Render(), "\n"))
}
