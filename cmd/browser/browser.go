// Package browser implements "sbx browser".
package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/browser"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// BrowserOptions are the inputs of "sbx browser".
type BrowserOptions struct {
	IO       *iostreams.IOStreams
	Factory  *cmdutil.Factory
	Name     string
	Headless bool
	JSON     bool
}

// Result is the --json output of "sbx browser". Field names are stable.
type Result struct {
	Name      string `json:"name"`
	Container string `json:"container"`
	ID        string `json:"id"`
	Image     string `json:"image"`
	Headless  bool   `json:"headless"`
	Browser   string `json:"browser"` // Chromium's product string, e.g. Chrome/120.0.6099.224
	// Token is what the endpoints ask of every client; their URLs carry it already, and
	// a client may send it as "Authorization: Bearer TOKEN" instead.
	Token     string    `json:"token"`
	Endpoints Endpoints `json:"endpoints"`
}

// Endpoints are where the browser is reached from this host, all on 127.0.0.1 and behind
// the token.
type Endpoints struct {
	CDP   Endpoint  `json:"cdp"`             // the DevTools protocol, a ws:// URL
	NoVNC *Endpoint `json:"novnc,omitempty"` // the browser's screen; absent when headless
}

// Endpoint is one URL and, for noVNC, its one-off password.
type Endpoint struct {
	URL      string `json:"url"`
	Password string `json:"password,omitempty"`
}

// profileSource is where the browser profile comes from: this command, above every file.
var profileSource = config.Source{Layer: config.LayerFlag, Name: "sbx browser"}

// NewCmdBrowser builds "sbx browser".
func NewCmdBrowser(f *cmdutil.Factory, runF func(context.Context, *BrowserOptions) error) *cobra.Command {
	opts := &BrowserOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "browser [-n NAME] [--headless] [--json]",
		Short: "Start Chromium in a new sandbox and print how to reach it",
		Long: `Start a new sandbox of the browser profile running Chromium, wait until it answers, and
print its endpoints: cdp, the DevTools protocol (a ws:// URL for Playwright, Puppeteer or
chrome-remote-interface), and unless --headless, novnc, a page showing the browser's screen,
with a one-off password printed only here.

The ports are published on 127.0.0.1 only, with host ports the engine picks, behind sbx's
relay in the sandbox, which refuses (401) any request without the sandbox's token: a
secret made at start, kept nowhere, printed only here as the first path segment of each
URL, which Puppeteer's browserWSEndpoint and Playwright's connectOverCDP take as they are
(as does http://127.0.0.1:PORT/TOKEN for a browserURL). A client may send it as
"Authorization: Bearer TOKEN" instead (the token field of --json). Whoever controls the
engine can read it from the container's variables. The sandbox keeps the usual hardening, but it uses network bridge (the profile's default) so
that it can publish ports, and Chromium can reach the network.

Needs the browser tool, which the default policy denies; allow it in .sbx.yaml with
tools: {allow: [exec, read, write, browser], deny: []} (see "sbx explain --tool browser").
The sandbox is named after the project's with -browser appended unless -n says otherwise;
it must not exist yet. Remove it with "sbx rm -f NAME".`,
		Example: `  sbx browser
  sbx browser --headless --json | jq -r .endpoints.cdp.url
  sbx browser -n scraper --headless`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Name != "" {
				if err := config.ValidName(opts.Name); err != nil {
					return errs.Usagef("%v", err)
				}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return browserRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVarP(&opts.Name, "name", "n", "", "sandbox `name` (default: the project's sandbox name with -browser appended)")
	cmd.Flags().BoolVar(&opts.Headless, "headless", false, "run Chromium without a screen: no noVNC, no password")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the endpoints as JSON")
	return cmd
}

func browserRun(ctx context.Context, opts *BrowserOptions) error {
	f := opts.Factory
	layer := []config.Setting{{Key: "profile", Values: []string{images.ProfileBrowser}, Source: profileSource}}
	if opts.Headless {
		layer = append(layer, config.Setting{Key: "env", Values: []string{browser.HeadlessEnv + "=1"},
			Source: config.Source{Layer: config.LayerFlag, Name: "--headless"}})
	}
	name := opts.Name
	if name == "" {
		r, err := cmdutil.ResolveConfig(f, "", layer...)
		if r == nil {
			return err
		}
		name = DefaultName(r.Name)
	}
	r, err := cmdutil.ResolveConfig(f, name, layer...)
	if err != nil {
		return err
	}
	if err := config.CheckTool(r, config.ToolBrowser); err != nil {
		return err
	}
	if err := sandbox.CanPublish(r.Config.Network); err != nil {
		return errs.Failure(fmt.Errorf("sbx browser publishes ports: %w", err),
			fmt.Sprintf("network comes from %s; set network: bridge for this sandbox, or leave it to the browser profile", r.Source("network")))
	}

	m, err := cmdutil.Manager(ctx, f)
	if err != nil {
		return err
	}
	in, err := m.Resolver.SpecInput(r)
	if err != nil {
		return err
	}
	in.CreateSettings = layer
	opts.IO.Progressf("starting Chromium in sandbox %q\n", name)
	b, err := browser.Start(ctx, m, in, browser.Options{})
	var startErr *browser.StartError
	if errors.As(err, &startErr) {
		printStartFailure(opts.IO.ErrOut, startErr)
	}
	if err != nil {
		return err
	}
	_ = m.State.Touch(name)

	res := Result{Name: name, Container: sandbox.ContainerName(name), ID: b.Sandbox.ID, Image: r.Config.Image,
		Headless: b.Headless, Browser: b.Version, Token: b.Token, Endpoints: Endpoints{CDP: Endpoint{URL: b.CDP}}}
	if b.NoVNC != "" {
		res.Endpoints.NoVNC = &Endpoint{URL: b.NoVNC, Password: b.Password}
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, res)
	}
	return printEndpoints(opts.IO, res)
}

// printStartFailure writes the end of a failed browser's log, which the sandbox wrote,
// before the error.
func printStartFailure(w io.Writer, e *browser.StartError) {
	fmt.Fprint(w, cmdutil.SafeLines(e.Summary()))
}

// printEndpoints writes the endpoint table on stdout, the only place the token and the
// password appear.
func printEndpoints(io *iostreams.IOStreams, res Result) error {
	rows := [][]string{{"cdp", res.Endpoints.CDP.URL, "-"}}
	if v := res.Endpoints.NoVNC; v != nil {
		rows = append(rows, []string{"novnc", v.URL, v.Password})
	}
	cmdutil.Table{Headers: []string{"ENDPOINT", "URL", "PASSWORD"}, Rows: rows}.Print(io)
	// The product string is what Chromium in the sandbox said it is.
	io.Progressf("sandbox %s runs %s; remove it with: sbx rm -f %s\n", res.Name, cmdutil.SafeText(res.Browser), res.Name)
	return nil
}

// DefaultName is the browser sandbox of a project whose own sandbox is project: its name
// with -browser appended, shortening the slug before the hash when the name would pass 63
// characters.
func DefaultName(project string) string {
	const suffix, limit = "-browser", 63
	if len(project)+len(suffix) <= limit {
		return project + suffix
	}
	slug, hash := project, ""
	if i := strings.LastIndexByte(project, '-'); i > 0 {
		slug, hash = project[:i], project[i:]
	}
	keep := max(limit-len(suffix)-len(hash), 1)
	slug = strings.TrimRight(slug[:min(keep, len(slug))], "-_.")
	return slug + hash + suffix
}
