package cmdutil

import (
	"context"
	"fmt"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// removeThrowawayTimeout bounds the removal of a throwaway sandbox after its command, which
// runs even when sbx was interrupted.
const removeThrowawayTimeout = time.Minute

// Throwaway is the fresh sandbox of a --rm command: claimed before anything is created,
// removed by Remove when the command ends, or by the next sbx that sweeps (Manager) when
// this one was killed first.
type Throwaway struct {
	Name string

	f       *Factory
	claim   *sandbox.Throwaway
	ensured bool
}

// ClaimThrowaway records a fresh throwaway sandbox name in sbx's state directory. It never
// dials the engine; callers defer Remove at once.
func ClaimThrowaway(f *Factory) (*Throwaway, error) {
	claim, err := (&sandbox.StateStore{Dir: StateDir(f), Now: f.Now}).ClaimThrowaway()
	if err != nil {
		return nil, errs.Failure(err, "sbx records throwaway sandboxes in "+StateDir(f)+"; make it writable")
	}
	return &Throwaway{Name: claim.Name, f: f, claim: claim}, nil
}

// EnsureFunc ensures the sandbox of r, as EnsureSandbox does.
type EnsureFunc func(context.Context, *Factory, *config.Resolved) (*sandbox.Manager, *sandbox.Sandbox, func(), error)

// SandboxFor returns the sandbox a command works in: name, or with rm a fresh throwaway one;
// the function that ensures it; and the one to defer, which removes a throwaway sandbox.
func SandboxFor(f *Factory, name string, rm bool) (string, EnsureFunc, func(context.Context), error) {
	if !rm {
		return name, EnsureSandbox, func(context.Context) {}, nil
	}
	t, err := ClaimThrowaway(f)
	if err != nil {
		return "", nil, nil, err
	}
	return t.Name, t.Ensure, t.Remove, nil
}

// Ensure is EnsureSandbox for the throwaway sandbox, whose config r was resolved under its
// name.
func (t *Throwaway) Ensure(ctx context.Context, f *Factory, r *config.Resolved) (*sandbox.Manager, *sandbox.Sandbox, func(), error) {
	if _, err := Manager(ctx, f); err != nil {
		return nil, nil, nil, err // no engine: nothing was made, and Remove drops the record alone
	}
	t.ensured = true
	return EnsureSandbox(ctx, f, r)
}

// Remove removes the sandbox with its volume, networks and state, and then its record, also
// when ctx was cancelled (Ctrl-C, SIGTERM). The command's own outcome stays what it was: a
// removal that fails is reported on stderr, and the record left for the next sweep.
func (t *Throwaway) Remove(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeThrowawayTimeout)
	defer cancel()
	var err error
	if !t.ensured {
		// Nothing was created: the record goes without dialing the engine.
		err = t.claim.Drop()
	} else if m, merr := Manager(ctx, t.f); merr != nil {
		err = merr
	} else {
		err = m.RemoveThrowaway(ctx, t.claim)
	}
	if err != nil {
		fmt.Fprintf(t.f.IOStreams.ErrOut, "warning: throwaway sandbox %q was not removed: %v\nhint: the next sbx exec, ls, create or prune removes it\n", t.Name, err)
	}
}

// sweepThrowaways removes the throwaway sandboxes of sbx processes that died before
// removing them, saying so on stderr. It is cheap (one directory read when there are none)
// and a failure only warns: the command goes on.
func sweepThrowaways(ctx context.Context, f *Factory, m *sandbox.Manager) {
	removed, err := m.SweepThrowaways(ctx)
	for _, name := range removed {
		f.IOStreams.Progressf("removed throwaway sandbox %q, left by an sbx that did not finish\n", name)
	}
	if err != nil {
		fmt.Fprintf(f.IOStreams.ErrOut, "warning: a throwaway sandbox left by an sbx that did not finish was not removed: %v\n", err)
	}
}
