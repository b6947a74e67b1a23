package cmdutil

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

// Table is tabular command output: a lipgloss table on a terminal, tab-separated values when
// piped (no header styling, one row per line, so cut and awk work). Cells often hold what a
// sandbox chose (a command, a directory), so every cell is shown through SafeText: a tab or a
// newline cannot split it, and an escape sequence cannot reach the terminal.
type Table struct {
	Headers []string
	Rows    [][]string
	// Color optionally colours a cell on a terminal; "" leaves it plain.
	Color func(row, col int) lipgloss.Color
}

// Print writes t to io.Out.
func (t Table) Print(io *iostreams.IOStreams) {
	rows := make([][]string, len(t.Rows))
	for i, r := range t.Rows {
		rows[i] = make([]string, len(r))
		for j, c := range r {
			rows[i][j] = SafeText(c)
		}
	}
	if !io.IsStdoutTTY() {
		fmt.Fprintln(io.Out, strings.Join(t.Headers, "\t"))
		for _, r := range rows {
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
		Rows(rows...).
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
