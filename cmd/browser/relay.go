package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/internal/procs"
	"github.com/sbx-sandbox/sbx/pkg/browserrelay"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// RelayOptions are the inputs of "sbx browser-relay".
type RelayOptions struct {
	TokenFile string
	// CDP and NoVNC are LISTEN=BACKEND pairs; NoVNC is empty when headless.
	CDP, NoVNC string
}

// NewCmdRelay builds "sbx browser-relay", which the browser image's entrypoint runs inside
// the sandbox in front of Chromium's DevTools port and noVNC (pkg/browserrelay).
func NewCmdRelay(_ *cmdutil.Factory, runF func(context.Context, *RelayOptions) error) *cobra.Command {
	opts := &RelayOptions{}
	cmd := &cobra.Command{
		Use:    "browser-relay --token-file FILE --cdp LISTEN=BACKEND [--novnc LISTEN=BACKEND]",
		Short:  "Gate a browser sandbox's ports behind its token (the browser image runs it in the sandbox)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return relayRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.TokenFile, "token-file", "", "`FILE` holding the token, removed once read")
	fl.StringVar(&opts.CDP, "cdp", "", "`LISTEN=BACKEND`: where to listen for DevTools clients, and Chromium's port")
	fl.StringVar(&opts.NoVNC, "novnc", "", "`LISTEN=BACKEND`: where to listen for noVNC, and websockify's port")
	for _, name := range []string{"token-file", "cdp"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// relayRoute is one listener and the backend it relays to.
type relayRoute struct {
	listen, backend string
	cdp             bool
}

func parseRoute(flag, v string, cdp bool) (relayRoute, error) {
	listen, backend, ok := strings.Cut(v, "=")
	if !ok || listen == "" || backend == "" {
		return relayRoute{}, errs.Usagef("--%s %q: want LISTEN=BACKEND", flag, v)
	}
	return relayRoute{listen: listen, backend: backend, cdp: cdp}, nil
}

// readToken reads the token file and removes it, so nothing else in the sandbox finds it
// later; the token never passes through the relay's arguments, which every user of the
// host sees.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	data, err := io.ReadAll(io.LimitReader(f, 256))
	f.Close()
	if err != nil {
		return "", err
	}
	if err := os.Remove(path); err != nil {
		return "", err
	}
	token := string(bytes.TrimSpace(data))
	if !browserrelay.ValidToken(token) {
		return "", fmt.Errorf("%s does not hold a token of 48 hex digits", path)
	}
	return token, nil
}

func relayRun(ctx context.Context, opts *RelayOptions) error {
	procs.All() // a server relaying a browser's sessions
	routes := []relayRoute{}
	for _, r := range []struct {
		flag, v string
		cdp     bool
	}{{"cdp", opts.CDP, true}, {"novnc", opts.NoVNC, false}} {
		if r.v == "" {
			continue
		}
		route, err := parseRoute(r.flag, r.v, r.cdp)
		if err != nil {
			return err
		}
		routes = append(routes, route)
	}
	token, err := readToken(opts.TokenFile)
	if err != nil {
		return fmt.Errorf("browser relay: %w", err)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, len(routes))
	for _, r := range routes {
		h, err := browserrelay.New(token, r.backend, r.cdp)
		if err != nil {
			return fmt.Errorf("browser relay: %w", err)
		}
		l, err := net.Listen("tcp", r.listen)
		if err != nil {
			return fmt.Errorf("browser relay: %w", err)
		}
		go func() { done <- browserrelay.Serve(ctx, l, h) }()
	}
	// One listener failing ends them all: the entrypoint then stops the sandbox.
	err = <-done
	cancel()
	for range len(routes) - 1 {
		<-done
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return fmt.Errorf("browser relay: %w", err)
}
