// Package egress implements "sbx egress": the decision log of a sandbox's egress proxy
// (log), runtime changes of its rules (allow, deny), and the proxy itself (hidden: sbx
// starts it in the sandbox's proxy container).
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/internal/procs"
	"github.com/sbx-sandbox/sbx/pkg/egress"
)

// ProxyOptions are the inputs of "sbx egress proxy".
type ProxyOptions struct {
	Rules, Log, Ready, Sandbox, Listen string
}

// NewCmdEgress builds "sbx egress".
func NewCmdEgress(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "egress <command>",
		Short: "The egress allowlist of sandboxes with egress rules",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(NewCmdLog(f, nil), NewCmdAllow(f, nil), NewCmdDeny(f, nil), NewCmdProxy(f, nil))
	return cmd
}

// NewCmdProxy builds "sbx egress proxy", which sbx runs in a sandbox's proxy container.
func NewCmdProxy(f *cmdutil.Factory, runF func(context.Context, *ProxyOptions) error) *cobra.Command {
	opts := &ProxyOptions{}
	cmd := &cobra.Command{
		Use:    "proxy --rules FILE --log FILE --listen ADDR",
		Short:  "Run the filtering proxy of a sandbox (sbx starts it in the sandbox's proxy container)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return proxyRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Rules, "rules", "", "rules `FILE` (egress.WriteFile's format), re-read when it changes")
	fl.StringVar(&opts.Log, "log", "", "decision log `FILE`, appended to and rotated to FILE.1")
	fl.StringVar(&opts.Ready, "ready", "", "`FILE` written once the proxy listens")
	fl.StringVar(&opts.Sandbox, "sandbox", "", "sandbox `NAME` for the log and refusals")
	fl.StringVar(&opts.Listen, "listen", "", "`ADDR:PORT` to listen on, the proxy's address on the sandbox's network only, or unix:PATH, a socket only the sandbox sees")
	for _, name := range []string{"rules", "log", "listen"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func proxyRun(ctx context.Context, opts *ProxyOptions) error {
	procs.All() // a server relaying every sandbox's downloads
	// Bounded: a sandbox looping requests to a denied host would otherwise fill the host's disk.
	logFile, err := egress.OpenLogFile(opts.Log, egress.DefaultLogFileMax, time.Now)
	if err != nil {
		return err
	}
	defer logFile.Close()
	srv, err := egress.NewServer(egress.Config{Sandbox: opts.Sandbox, RulesFile: opts.Rules, Log: logFile,
		Resolver: net.DefaultResolver, Dialer: &net.Dialer{}})
	if err != nil {
		return err
	}
	l, err := listen(opts.Listen)
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	if opts.Ready != "" {
		// sbx starts the sandbox only once this file is there: before, its requests would fail.
		if err := os.WriteFile(opts.Ready, []byte(l.Addr().String()+"\n"), 0o644); err != nil {
			l.Close()
			return fmt.Errorf("egress proxy: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, egress.ErrServerClosed) {
		return err
	}
	return nil
}

// listen listens on addr, "ADDR:PORT" or "unix:PATH". The socket replaces one an earlier
// start left, and anyone may connect to it (0666): the sandbox's user is not the proxy's,
// and only the sandbox sees its directory.
func listen(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return net.Listen("tcp", addr)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}
