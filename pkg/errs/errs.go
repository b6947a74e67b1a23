// Package errs holds the error types that carry an exit code or a hint to cmd.Main,
// so any package can say how a failure should end the process without importing cmd.
package errs

import (
	"context"
	"errors"
	"fmt"
)

// Exit codes shared by every command; cmd.Main is the only place that turns errors into them.
const (
	CodeOK          = 0
	CodeError       = 1
	CodeUsage       = 2
	CodeTimeout     = 124
	CodeFailure     = 125 // sbx itself or the engine failed
	CodeCannotExec  = 126
	CodeNotFound    = 127
	CodeInterrupted = 130
)

// UsageError is a mistake in how the command was called (exit 2).
type UsageError struct {
	Err  error
	hint string
}

// Usagef builds a UsageError.
func Usagef(format string, a ...any) *UsageError {
	return &UsageError{Err: fmt.Errorf(format, a...)}
}

// WithHint returns a copy of e carrying hint.
func (e *UsageError) WithHint(hint string) *UsageError {
	return &UsageError{Err: e.Err, hint: hint}
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }
func (e *UsageError) ExitCode() int { return CodeUsage }
func (e *UsageError) Hint() string  { return e.hint }

// ExitError reports a process's own exit status; Main exits with it silently.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }
func (e *ExitError) ExitCode() int { return e.Code }
func (e *ExitError) Silent() bool  { return true }

// Error is an error with an exit code and an optional hint for the user.
type Error struct {
	Err  error
	Code int
	hint string
}

// New wraps err with an exit code and a hint (which may be empty).
func New(err error, code int, hint string) *Error {
	return &Error{Err: err, Code: code, hint: hint}
}

// Failure wraps err as an sbx or engine failure (exit 125) with a hint.
func Failure(err error, hint string) *Error { return New(err, CodeFailure, hint) }

// Engine wraps the failure of an engine call made for what ("inspecting sandbox \"web\"")
// as exit 125 with the engine's words; a call ended by its context's cancel or deadline
// stays that, so the command's interruption or timeout decides the exit code.
func Engine(what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return Failure(fmt.Errorf("%s: %w", what, err), "")
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }
func (e *Error) ExitCode() int { return e.Code }
func (e *Error) Hint() string  { return e.hint }

// ExitCode returns the exit code err asks for, defaulting to 1.
func ExitCode(err error) int {
	if err == nil {
		return CodeOK
	}
	var c interface{ ExitCode() int }
	if errors.As(err, &c) {
		return c.ExitCode()
	}
	return CodeError
}

// Hint returns the outermost non-empty hint carried by err.
func Hint(err error) string {
	for err != nil {
		if h, ok := err.(interface{ Hint() string }); ok && h.Hint() != "" {
			return h.Hint()
		}
		err = errors.Unwrap(err)
	}
	return ""
}

// Silent reports whether err should end the process without a message.
func Silent(err error) bool {
	var s interface{ Silent() bool }
	return errors.As(err, &s) && s.Silent()
}
