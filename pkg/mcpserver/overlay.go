package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/sbx-sandbox/sbx/pkg/workspace"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/overlay"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// The overlay tools: what the sandbox changed in an overlay workspace, and, when the user's
// policy allows the apply tool, writing it onto the host project.

// DiffInput is the diff tool's arguments.
type DiffInput struct {
	Paths          []string `json:"paths,omitempty" jsonschema:"keep only changes at or under these project paths (default: all)"`
	Patch          bool     `json:"patch,omitempty" jsonschema:"also return the changes as a unified diff that git apply accepts"`
	MaxOutputBytes int64    `json:"maxOutputBytes,omitempty" jsonschema:"keep at most this many bytes of the patch (default 262144)"`
}

// DiffOutput is what the sandbox changed against the host project.
type DiffOutput struct {
	Changes   []overlay.Change `json:"changes" jsonschema:"every change with its status (added, modified, deleted, renamed, mode), kind, modes, whether it is binary, protected (apply skips it) or in conflict (the host changed the path since the sandbox was created)"`
	Digest    string           `json:"digest" jsonschema:"the change set's digest: pass it to apply as expect, and apply writes exactly these changes or nothing"`
	Patch     string           `json:"patch,omitempty"`
	Truncated bool             `json:"truncated" jsonschema:"the patch was longer than maxOutputBytes and was cut"`
}

// LabelInput names a checkpoint.
type LabelInput struct {
	Label string `json:"label" jsonschema:"checkpoint label: letters, digits, '_', '.' and '-', at most 64"`
}

// ApplyInput is the apply tool's arguments.
type ApplyInput struct {
	Paths  []string `json:"paths,omitempty" jsonschema:"apply only changes at or under these project paths (default: all)"`
	DryRun bool     `json:"dryRun,omitempty" jsonschema:"list what would be applied and change nothing"`
	Expect string   `json:"expect,omitempty" jsonschema:"the digest diff returned: apply refuses, writing nothing, when the changes are no longer those"`
}

// layers returns the overlay layers of the sandbox, which must have workspace overlay.
func (s *server) layers(ctx context.Context) (overlay.Layers, error) {
	if s.Resolved.Config.Workspace != config.WorkspaceOverlay {
		return overlay.Layers{}, fmt.Errorf("sandbox %q has workspace %s, not overlay: there is nothing to diff or apply", s.Resolved.Name, s.Resolved.Config.Workspace)
	}
	m, sb, release, err := s.Sandbox(ctx)
	if err != nil {
		return overlay.Layers{}, err
	}
	defer release()
	return workspace.New(m).Layers(ctx, sb.Name)
}

func (s *server) diff(ctx context.Context, in DiffInput) (DiffOutput, error) {
	_, limit, err := s.callLimits(0, in.MaxOutputBytes)
	if err != nil {
		return DiffOutput{}, err
	}
	l, err := s.layers(ctx)
	if err != nil {
		return DiffOutput{}, err
	}
	m, sb, release, err := s.Sandbox(ctx)
	if err != nil {
		return DiffOutput{}, err
	}
	release()
	var out DiffOutput
	// Paused while read, so the changes, their digest and the patch are one state.
	_, err = workspace.New(m).Frozen(ctx, sb.Name, func() error {
		changes, err := l.Changes(s.Resolved.Config.ProtectedPaths, in.Paths)
		if err != nil {
			return err
		}
		if out.Digest, err = l.Digest(changes); err != nil {
			return err
		}
		out.Changes = changes
		if out.Changes == nil {
			out.Changes = []overlay.Change{}
		}
		if in.Patch {
			var b strings.Builder
			w := &sandbox.CapWriter{W: &b, Limit: limit}
			if err := l.Patch(w, changes); err != nil {
				return err
			}
			out.Patch, out.Truncated = b.String(), w.Truncated()
		}
		return nil
	})
	return out, err
}

func (s *server) apply(ctx context.Context, in ApplyInput) (overlay.ApplyResult, error) {
	l, err := s.layers(ctx)
	if err != nil {
		return overlay.ApplyResult{}, err
	}
	m, sb, release, err := s.Sandbox(ctx)
	if err != nil {
		return overlay.ApplyResult{}, err
	}
	release()
	// Protected paths are never applied from here: only the user, with sbx apply
	// --include-protected after looking at them.
	o := overlay.ApplyOptions{Paths: in.Paths, ProtectedPaths: s.Resolved.Config.ProtectedPaths, DryRun: in.DryRun, Umask: s.Umask,
		Review: func(_ []overlay.Change, digest string) error {
			if in.Expect != "" && digest != in.Expect {
				return fmt.Errorf("the changes are %s, not the %s expected: nothing was applied; call diff again", digest, in.Expect)
			}
			return nil
		}}
	var res *overlay.ApplyResult
	run := func() (err error) {
		res, err = l.Apply(o)
		return err
	}
	// The sandbox is stopped for a real apply (when idle), as sbx apply does; the next call
	// starts it again.
	if in.DryRun {
		_, err = workspace.New(m).Frozen(ctx, sb.Name, run)
	} else {
		_, err = workspace.New(m).Change(ctx, sb.Name, "apply", false, run)
	}
	if res == nil {
		return overlay.ApplyResult{}, err
	}
	return *res, err
}

func (s *server) checkpoint(ctx context.Context, in LabelInput) (overlay.Checkpoint, error) {
	l, err := s.layers(ctx)
	if err != nil {
		return overlay.Checkpoint{}, err
	}
	return l.Checkpoint(in.Label)
}

// RollbackOutput says what a rollback did.
type RollbackOutput struct {
	Label     string `json:"label"`
	Restarted bool   `json:"restarted" jsonschema:"the sandbox ran and was stopped for the rollback: its processes and shell sessions ended, /tmp is empty"`
}

func (s *server) rollback(ctx context.Context, in LabelInput) (RollbackOutput, error) {
	if _, err := s.layers(ctx); err != nil {
		return RollbackOutput{}, err
	}
	m, sb, release, err := s.Sandbox(ctx)
	if err != nil {
		return RollbackOutput{}, err
	}
	release()
	was, err := workspace.New(m).Rollback(ctx, sb.Name, in.Label)
	if err != nil {
		return RollbackOutput{}, err
	}
	return RollbackOutput{Label: in.Label, Restarted: was}, nil
}
