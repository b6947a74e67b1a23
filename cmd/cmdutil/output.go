package cmdutil

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/sbx-sandbox/sbx/cmd/iostreams"
)

// WriteJSON writes v as indented JSON followed by a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Confirm asks a yes/no question on stderr and reads the answer from stdin; only y or yes is yes.
func Confirm(io *iostreams.IOStreams, prompt string) bool {
	fmt.Fprint(io.ErrOut, prompt)
	line, _ := bufio.NewReader(io.In).ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes"
}
