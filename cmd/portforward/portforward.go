// Package portforward implements "sbx port-forward".
package portforward

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/internal/procs"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/portforward"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// DefaultWait is how long --wait (and --wait-http alone) waits for the ports inside.
const DefaultWait = time.Minute

// PortForwardOptions are the inputs of "sbx port-forward".
type PortForwardOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory

	Name     string
	Specs    []portforward.Spec
	JSON     bool
	Wait     time.Duration // 0: print the mappings at once
	WaitHTTP string
}

// Output is "sbx port-forward --json". Field names are stable.
type Output struct {
	Sandbox  string    `json:"sandbox"`
	Forwards []Mapping `json:"forwards"`
}

// Mapping is one forward in Output.
type Mapping struct {
	Address    string `json:"address"`
	LocalPort  int    `json:"localPort"`
	RemotePort int    `json:"remotePort"`
	URL        string `json:"url"`
}

// NewCmdPortForward builds "sbx port-forward".
func NewCmdPortForward(f *cmdutil.Factory, runF func(context.Context, *PortForwardOptions) error) *cobra.Command {
	opts := &PortForwardOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "port-forward [flags] [[ADDR:]LOCAL:]REMOTE...",
		Short: "Reach a port inside a sandbox from this machine",
		Long: `Listen on a local port and relay every connection to a port on the sandbox's loopback
(the project's default sandbox, or -n NAME), through sbx's agent in the sandbox: it works
with network none, under every isolation level, without publishing a port or recreating
the sandbox. The sandbox must be running.

REMOTE alone listens on the same port number; LOCAL 0 picks a free port. sbx listens on
127.0.0.1 unless ADDR names another address, which every host that reaches this machine
can then use (sbx warns). Once listening (and, with --wait, once the ports inside are
ready) it prints one URL per mapping on stdout, or with --json the mappings, and relays
until interrupted (Ctrl-C, SIGTERM: exit 0). A connection that finds nothing listening
inside is closed and reported on stderr; the forward keeps serving.

--wait waits (1m unless a duration is given) until something listens on each REMOTE port
inside; --wait-http PATH also waits until GET PATH answers 2xx or 3xx. Not ready in time
is exit 124. A local port in use is exit 1.`,
		Example: `  sbx exec -d --wait-port 8000 -- python3 -m http.server 8000
  sbx port-forward 0:8000
  sbx port-forward -n web --wait=2m --wait-http /health 8080:80
  sbx port-forward --json 0:5432 | jq -r '.forwards[0].url'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				sp, err := portforward.ParseSpec(a)
				if err != nil {
					return errs.Usagef("%v", err).WithHint("write [[ADDR:]LOCAL:]REMOTE, e.g. 8000, 0:8000 or 127.0.0.1:9000:8000")
				}
				opts.Specs = append(opts.Specs, sp)
			}
			if p := opts.WaitHTTP; p != "" {
				if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, " \t\r\n\x00") {
					return errs.Usagef("bad --wait-http %q: want a path such as /health", p)
				}
				if !cmd.Flags().Changed("wait") {
					opts.Wait = DefaultWait
				}
			}
			if cmd.Flags().Changed("wait") && opts.Wait <= 0 {
				return errs.Usagef("--wait needs a positive duration")
			}
			if !cmd.Flags().Changed("wait") && opts.WaitHTTP == "" {
				opts.Wait = 0
			}
			return cmdutil.RunNamed(cmd.Context(), opts.Name, opts, runF, portForwardRun)
		},
	}
	fl := cmd.Flags()
	cmdutil.NameFlag(fl, &opts.Name)
	fl.BoolVar(&opts.JSON, "json", false, "print the mappings as JSON")
	fl.DurationVar(&opts.Wait, "wait", DefaultWait, "wait up to `duration` until something listens on each port inside")
	fl.Lookup("wait").NoOptDefVal = DefaultWait.String()
	fl.StringVar(&opts.WaitHTTP, "wait-http", "", "with --wait, also wait until GET `path` answers 2xx or 3xx")
	return cmd
}

func portForwardRun(ctx context.Context, opts *PortForwardOptions) error {
	procs.All() // relays connections until stopped
	m, sb, release, err := cmdutil.RunningSandbox(ctx, opts.Factory, opts.Name)
	if err != nil {
		return err
	}
	defer release()
	fws, err := portforward.Listen(ctx, opts.Specs)
	if err != nil {
		return err
	}
	defer func() {
		for _, fw := range fws {
			fw.Close()
		}
	}()
	for _, fw := range fws {
		if !fw.Loopback() {
			fmt.Fprintf(opts.IO.ErrOut, "warning: listening on %s, not loopback: whoever reaches this machine there reaches port %d in sandbox %q\n",
				net.JoinHostPort(fw.Host(), strconv.Itoa(fw.Port())), fw.Remote, sb.Name)
		}
	}
	if opts.Wait > 0 {
		waited := map[int]bool{}
		for _, fw := range fws {
			if waited[fw.Remote] {
				continue
			}
			waited[fw.Remote] = true
			opts.IO.Progressf("waiting for port %d in sandbox %q\n", fw.Remote, sb.Name)
			if err := portforward.WaitPort(ctx, m.PortDialer(sb), sb.Name, fw.Remote, opts.WaitHTTP, opts.Wait); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
	if err := printMappings(opts, sb, fws); err != nil {
		return err
	}
	dial := m.PortDialer(sb)
	var reportMu sync.Mutex
	report := func(err error) {
		reportMu.Lock()
		defer reportMu.Unlock()
		fmt.Fprintf(opts.IO.ErrOut, "warning: %s\n", cmdutil.SafeText(err.Error()))
	}
	errc := make(chan error, len(fws))
	for _, fw := range fws {
		go func() { errc <- portforward.Serve(ctx, fw, dial, report) }()
	}
	var first error
	for range fws {
		if err := <-errc; err != nil && first == nil {
			first = errs.Failure(err, "")
		}
	}
	return first
}

// printMappings prints one URL a line, or the JSON document, and says on stderr what goes
// where.
func printMappings(opts *PortForwardOptions, sb *sandbox.Sandbox, fws []*portforward.Forward) error {
	out := Output{Sandbox: sb.Name, Forwards: []Mapping{}}
	for _, fw := range fws {
		out.Forwards = append(out.Forwards, Mapping{Address: fw.Host(), LocalPort: fw.Port(), RemotePort: fw.Remote, URL: fw.URL()})
		opts.IO.Progressf("forwarding %s to port %d in sandbox %q; Ctrl-C ends it\n",
			net.JoinHostPort(fw.Host(), strconv.Itoa(fw.Port())), fw.Remote, sb.Name)
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, out)
	}
	for _, mp := range out.Forwards {
		if _, err := fmt.Fprintln(opts.IO.Out, mp.URL); err != nil {
			return err
		}
	}
	return nil
}
