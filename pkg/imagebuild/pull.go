package imagebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/registryauth"
	"github.com/sbx-sandbox/sbx/pkg/termtext"
)

// PullError is a pull that failed: which registry, why, and what to do about it.
type PullError struct {
	Ref, Registry string
	Reason        string // engine.PullAuth, PullNotFound, PullUnreachable or ""
	AuthSource    string // where the credentials came from, "" for none
	Message       string // the engine's words, cleaned for a terminal
}

func (e *PullError) Error() string {
	what := "pulling image " + e.Ref + " from registry " + e.Registry
	switch e.Reason {
	case engine.PullAuth:
		if e.AuthSource == "" {
			return what + ": the registry wants credentials and the Docker config has none for it: " + e.Message
		}
		return what + ": the registry refused the credentials from " + e.AuthSource + ": " + e.Message
	case engine.PullNotFound:
		return what + ": the registry has no such image: " + e.Message
	case engine.PullUnreachable:
		return what + ": the engine cannot reach the registry: " + e.Message
	}
	return what + ": " + e.Message
}

// ExitCode makes a failed pull an engine failure (125).
func (e *PullError) ExitCode() int { return errs.CodeFailure }

// Hint says what fixes the failure.
func (e *PullError) Hint() string {
	switch e.Reason {
	case engine.PullAuth:
		return "log in with: docker login " + e.Registry + " (sbx reads the Docker config in $DOCKER_CONFIG, else ~/.docker)"
	case engine.PullNotFound:
		return "check the name and tag of image:, and that your account may see it on " + e.Registry
	case engine.PullUnreachable:
		return "check that " + e.Registry + " is up and that the engine's host can reach it (its proxy and DNS settings)"
	}
	return "try docker pull " + e.Ref + " to see the engine's whole answer"
}

// Pull has the engine pull ref with the user's credentials for its registry, reporting to p.
func (m *Images) Pull(ctx context.Context, ref string, p Progress) error {
	reg, err := registryauth.Registry(ref)
	if err != nil {
		return errs.Usagef("%v", err).WithHint("set image to a reference such as debian:bookworm-slim")
	}
	var auth, source string
	if m.Auth != nil {
		if auth, source, err = m.Auth(ctx, reg); err != nil {
			return errs.Failure(fmt.Errorf("credentials for registry %s: %w", reg, err),
				"fix the Docker config ($DOCKER_CONFIG/config.json, else ~/.docker/config.json) or the credential helper it names")
		}
	}
	fail := func(msg string) error {
		msg = termtext.Clean(strings.TrimSpace(msg))
		e := &PullError{Ref: ref, Registry: reg, Reason: engine.PullFailure(msg), AuthSource: source, Message: msg}
		p.emit(PullFailed{Err: e})
		return e
	}
	start := m.now()
	rc, err := m.Engine.ImagePull(ctx, ref, image.PullOptions{RegistryAuth: auth})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fail(err.Error())
	}
	defer rc.Close()
	p.emit(PullStarted{Ref: ref, Registry: reg, AuthSource: source})
	var failure string
	err = eachMessage(rc, func(raw json.RawMessage, msg *jsonmessage.JSONMessage) bool {
		if msg.Error != nil {
			failure = msg.Error.Message
			return false
		}
		ev := Message{Raw: raw}
		if msg.Status != "" {
			ev.Pull = termtext.Clean(strings.TrimSpace(msg.ID + " " + msg.Status))
		}
		p.emit(ev)
		return true
	})
	switch {
	case err != nil && ctx.Err() != nil:
		p.emit(PullFailed{Err: ctx.Err()})
		return ctx.Err()
	case err != nil:
		return fail("reading the pull's progress: " + err.Error())
	case failure != "":
		return fail(failure)
	}
	st, err := m.inspect(ctx, "", ref)
	if err != nil {
		return err
	}
	if st.State == ImageMissing {
		return fail("the engine finished the pull but has no image " + ref)
	}
	p.emit(PullDone{Ref: ref, ID: st.ID, Elapsed: m.now().Sub(start)})
	return nil
}
