package configcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/cmd/cmdutil"
	"github.com/sbx-sandbox/sbx/cmd/iostreams"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestInitRun(t *testing.T) {
	root := t.TempDir()
	ios, _, _, stderr := iostreams.Test()
	opts := &InitOptions{IO: ios, ProjectRoot: func() (string, error) { return root, nil }}
	path := filepath.Join(root, config.ProjectFileName)

	if err := initRun(opts); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || string(data) != config.InitTemplate() {
		t.Fatalf("wrote %q, %v", data, err)
	}
	if !strings.Contains(stderr.String(), "wrote "+path) {
		t.Errorf("stderr = %q", stderr)
	}

	if err := os.WriteFile(path, []byte("memory: 2g\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = initRun(opts)
	if errs.ExitCode(err) != errs.CodeError || !strings.Contains(err.Error(), "already exists") || !strings.Contains(errs.Hint(err), "--force") {
		t.Errorf("overwrite without --force: %v", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "memory: 2g\n" {
		t.Error("the existing file was changed")
	}
	opts.Force = true
	if err := initRun(opts); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); string(data) != config.InitTemplate() {
		t.Error("--force did not overwrite")
	}
}

func TestNewCmdInitFindsTheProjectRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(root, "src")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	ios, _, _, _ := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Global: &cmdutil.GlobalOptions{}, WorkingDir: func() (string, error) { return sub, nil }}
	var got *InitOptions
	cmd := NewCmdInit(f, func(_ context.Context, o *InitOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--force"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	dir, err := got.ProjectRoot()
	real, _ := filepath.EvalSymlinks(root)
	if err != nil || dir != real || !got.Force {
		t.Errorf("root = %s, %v, force %v; want %s", dir, err, got.Force, real)
	}
}

func TestSchema(t *testing.T) {
	ios, _, out, _ := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Global: &cmdutil.GlobalOptions{}}
	cmd := NewCmdConfig(f)
	cmd.SetArgs([]string{"schema"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out.Bytes()) || !bytes.Contains(out.Bytes(), []byte(`"pidsLimit"`)) {
		t.Errorf("schema output:\n%.300s", out)
	}
}
