// Package trust implements "sbx trust".
package trust

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// TrustOptions are the inputs of "sbx trust".
type TrustOptions struct {
	IO      *iostreams.IOStreams
	Factory *cmdutil.Factory
	// Path is a project directory or its .sbx.yaml; "" is the current project's.
	Path   string
	Yes    bool
	Revoke bool
	List   bool
	JSON   bool
}

// NewCmdTrust builds "sbx trust".
func NewCmdTrust(f *cmdutil.Factory, runF func(context.Context, *TrustOptions) error) *cobra.Command {
	opts := &TrustOptions{IO: f.IOStreams, Factory: f}
	cmd := &cobra.Command{
		Use:   "trust [--yes] [--revoke] [--list] [PATH]",
		Short: "Let a project's .sbx.yaml loosen its sandbox, after showing what it loosens",
		Long: `A project's .sbx.yaml comes from whoever wrote the repository, so until you trust it, it may
only tighten the sandbox: every setting that loosens it (network, rw workspace, binds, passEnv,
mode, a custom image, limits above your ceilings, ...) is refused with exit 125.

sbx trust shows exactly what the file loosens compared with your own settings, for the default
sandbox and each sandboxes: section, asks on a terminal (--yes for scripts), and records the
file's path and the SHA-256 of the content you saw in $XDG_STATE_HOME/sbx/trust.json. Any change
to the file makes it untrusted again. PATH is a project directory or its .sbx.yaml (default:
the current project's).`,
		Example: `  sbx trust
  sbx trust --yes ~/src/app
  sbx trust --list
  sbx trust --revoke`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Path = args[0]
			}
			switch {
			case opts.List && (opts.Revoke || opts.Yes || opts.Path != ""):
				return errs.Usagef("--list takes no PATH, --yes or --revoke")
			case opts.Revoke && opts.Yes:
				return errs.Usagef("--revoke asks nothing; leave out --yes")
			case !opts.List && !opts.Revoke && !opts.Yes && !opts.JSON && !opts.IO.IsStdinTTY():
				return errs.Usagef("trusting a project file needs a yes, and no terminal is there to ask").
					WithHint("review what it loosens with \"sbx trust --json\" (or run sbx trust on a terminal), then pass --yes")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return trustRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&opts.Yes, "yes", "y", false, "trust without asking")
	fl.BoolVar(&opts.Revoke, "revoke", false, "forget the file: it may only tighten again")
	fl.BoolVar(&opts.List, "list", false, "list the files you trust and whether they changed since")
	fl.BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func trustRun(_ context.Context, opts *TrustOptions) error {
	store := cmdutil.TrustStore(opts.Factory)
	switch {
	case opts.List:
		return listRun(opts, store)
	case opts.Revoke:
		return revokeRun(opts, store)
	}
	in, err := inputs(opts)
	if err != nil {
		return err
	}
	rev, err := config.ReviewProject(in)
	if err != nil {
		return err
	}
	if rev.Trust.State == config.TrustNone {
		return errs.New(fmt.Errorf("no %s in the project %s", config.ProjectFileName, projectDir(in)), errs.CodeError,
			"sbx config init writes one; a project without one needs no trust")
	}
	if opts.JSON && !opts.Yes {
		return cmdutil.WriteJSON(opts.IO.Out, rev)
	}
	writeReview(opts.IO.ErrOut, rev)
	if !opts.Yes && !cmdutil.Confirm(opts.IO, "Trust it? [y/N] ") {
		return errs.New(errors.New("not trusted"), errs.CodeError, "")
	}
	rec, err := store.Trust(rev.Trust.File, rev.Trust.SHA256, rev.Trust.Files...)
	if err != nil {
		return errs.Failure(err, "")
	}
	rev.Trust.State, rev.Trust.TrustedAt, rev.Trust.Error = config.TrustTrusted, &rec.TrustedAt, ""
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, rev)
	}
	fmt.Fprintf(opts.IO.Out, "trusted %s\n", cmdutil.SafeText(rec.Path))
	return nil
}

// inputs are the config inputs of the project PATH names, or of the current one.
func inputs(opts *TrustOptions) (config.Inputs, error) {
	in := cmdutil.ConfigInputs(opts.Factory, "")
	if opts.Path == "" {
		return in, nil
	}
	p := opts.Path
	if !filepath.IsAbs(p) {
		wd, err := opts.Factory.WorkingDir()
		if err != nil {
			return in, errs.Failure(err, "")
		}
		p = filepath.Join(wd, p)
	}
	if filepath.Base(p) == config.ProjectFileName {
		p = filepath.Dir(p)
	}
	in.ProjectDir = p
	return in, nil
}

func projectDir(in config.Inputs) string {
	if in.ProjectDir != "" {
		return in.ProjectDir
	}
	wd, _ := in.WorkingDir()
	root, _, _, err := config.FindProjectRoot(wd, "", config.Discovery{GitTopLevel: in.GitTopLevel})
	if err != nil {
		return wd
	}
	return root
}

// writeReview shows what trusting the file accepts, with every value escaped: the file's
// author must not be able to draw on the terminal of the person deciding.
func writeReview(w io.Writer, rev *config.Review) {
	t := rev.Trust
	file := cmdutil.SafeText(t.File)
	switch {
	case t.State == config.TrustTrusted:
		fmt.Fprintf(w, "%s is trusted as it is (since %s).\n", file, t.TrustedAt.Format(time.DateOnly))
	case t.State == config.TrustChanged && t.ChangedFile != "":
		fmt.Fprintf(w, "%s, which %s points to, changed since you trusted it on %s.\n", cmdutil.SafeText(t.ChangedFile), file, t.TrustedAt.Format(time.DateOnly))
	case t.State == config.TrustChanged:
		fmt.Fprintf(w, "%s changed since you trusted it on %s.\n", file, t.TrustedAt.Format(time.DateOnly))
	default:
		fmt.Fprintf(w, "%s is not trusted: it may only tighten the sandbox.\n", file)
	}
	if t.Error != "" {
		fmt.Fprintf(w, "warning: %s\n", cmdutil.SafeText(t.Error))
	}
	if len(t.Files) > 0 {
		fmt.Fprintln(w, "Trusting it also trusts, with their content as it is now, the files it points to:")
		for _, f := range t.Files {
			fmt.Fprintf(w, "  %s %s\n", f.Key, cmdutil.SafeText(f.Path))
		}
	}
	if len(rev.Loosenings) == 0 {
		fmt.Fprintln(w, "It loosens nothing compared with your own settings.")
	} else {
		fmt.Fprintln(w, "Trusting it lets it loosen the sandbox compared with your own settings:")
		for _, l := range rev.Loosenings {
			where := "every sandbox"
			if l.Sandbox != "" {
				where = "sandbox " + l.Sandbox
			}
			fmt.Fprintf(w, "  line %d, %s: %s %q\n      %s\n", l.Source.Line, where, l.Key, l.Value, cmdutil.SafeText(l.Allows))
		}
	}
	if len(rev.Problems) > 0 {
		fmt.Fprintln(w, "Refused whether or not you trust it:")
		for _, p := range rev.Problems {
			fmt.Fprintf(w, "  %s\n", cmdutil.SafeText(p.String()))
		}
	}
	fmt.Fprintf(w, "sha256 %s\n", t.SHA256)
}

func revokeRun(opts *TrustOptions, store *config.TrustStore) error {
	in, err := inputs(opts)
	if err != nil {
		return err
	}
	file := filepath.Join(projectDir(in), config.ProjectFileName)
	found, err := store.Revoke(file)
	if err != nil {
		return errs.Failure(err, "")
	}
	if !found {
		opts.IO.Progressf("%s was not trusted\n", cmdutil.SafeText(file))
		return nil
	}
	fmt.Fprintf(opts.IO.Out, "revoked %s\n", cmdutil.SafeText(file))
	return nil
}

// listed is one row of --list.
type listed struct {
	Path      string    `json:"path"`
	SHA256    string    `json:"sha256"`
	TrustedAt time.Time `json:"trustedAt"`
	// State is current (the file is as trusted), changed, or missing.
	State string `json:"state"`
}

func listRun(opts *TrustOptions, store *config.TrustStore) error {
	recs, err := store.List()
	if err != nil {
		return errs.Failure(err, "")
	}
	rows := []listed{}
	for _, r := range recs {
		rows = append(rows, listed{Path: r.Path, SHA256: r.SHA256, TrustedAt: r.TrustedAt, State: currentState(r)})
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, rows)
	}
	t := cmdutil.Table{Headers: []string{"STATE", "TRUSTED", "SHA256", "PATH"}}
	for _, r := range rows {
		t.Rows = append(t.Rows, []string{r.State, r.TrustedAt.Format(time.RFC3339), r.SHA256[:min(12, len(r.SHA256))], cmdutil.SafeText(r.Path)})
	}
	t.Print(opts.IO)
	return nil
}

// currentState compares a trusted file with what is there now, reading at most what sbx
// would read as a config file.
func currentState(r config.TrustRecord) string {
	_, err := os.Lstat(r.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return "missing"
	}
	if sum, err := config.FileHash(r.Path); err == nil && sum == r.SHA256 && config.FilesAsTrusted(r) {
		return "current"
	}
	return "changed"
}
