package cmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestExitCodeMapping(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantCode   int
		wantStderr string
	}{
		{"success", nil, 0, ""},
		{"plain error", errors.New("boom"), 1, "error: boom\n"},
		{"usage", errs.Usagef("need a name"), 2, "error: need a name\n"},
		{"cobra unknown command", usageErrorFromCobra(errors.New(`unknown command "x" for "sbx"`)), 2, "error: unknown command \"x\" for \"sbx\"\nhint: run with --help to see the usage\n"},
		{"flag error", &flagError{err: errors.New("unknown flag: --x")}, 2, "error: unknown flag: --x\nhint: run with --help to see the usage\n"},
		{"engine failure with hint", fmt.Errorf("creating sandbox: %w", errs.Failure(errors.New("engine down"), "start Docker")), 125, "error: creating sandbox: engine down\nhint: start Docker\n"},
		{"timeout", errs.New(errors.New("timed out after 2s"), errs.CodeTimeout, ""), 124, "error: timed out after 2s\n"},
		{"process exit code is silent", &errs.ExitError{Code: 3}, 3, ""},
		{"wrapped process exit code", fmt.Errorf("exec: %w", &errs.ExitError{Code: 42}), 42, ""},
		{"cannot exec", errs.New(errors.New("permission denied"), errs.CodeCannotExec, ""), 126, "error: permission denied\n"},
		{"not found", errs.New(errors.New("no such command"), errs.CodeNotFound, ""), 127, "error: no such command\n"},
		{"interrupted", context.Canceled, 130, "error: context canceled\n"},
		// Errors quote what sandboxes say (stderr, file names); a terminal never obeys it.
		{"sandbox text in an error", errs.Failure(errors.New("starting \"x\": \x1b]0;pwned\x07\x1b[2J\nsecond line\u202e"), "look at \x1b[31mthis"), 125,
			"error: starting \"x\": \\u001b]0;pwned\\u0007\\u001b[2J\nsecond line\\u202e\nhint: look at \\u001b[31mthis\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := report(&stderr, tt.err); code != tt.wantCode {
				t.Errorf("code = %d, want %d", code, tt.wantCode)
			}
			if stderr.String() != tt.wantStderr {
				t.Errorf("stderr = %q, want %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}
