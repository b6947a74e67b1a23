package config

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkResolve resolves a project with a user file and a project file, as every sbx
// command that touches a sandbox does once.
func BenchmarkResolve(b *testing.B) {
	home, root := b.TempDir(), b.TempDir()
	user := filepath.Join(home, ".config", "sbx", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(user), 0o755); err != nil {
		b.Fatal(err)
	}
	files := map[string]string{
		user:                             "memory: 2g\nenv:\n  EDITOR: vi\n",
		filepath.Join(root, ".sbx.yaml"): "profile: common\nworkspace: ro\npidsLimit: 128\ntmpfs:\n  - /cache:size=64m\n",
	}
	for p, content := range files {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	in := Inputs{
		Getenv:     func(k string) string { return map[string]string{"HOME": home, "SBX_CPUS": "1"}[k] },
		HomeDir:    func() (string, error) { return home, nil },
		WorkingDir: func() (string, error) { return root, nil },
		Flags:      []Setting{{Key: "memory", Values: []string{"1g"}, Source: Source{Layer: LayerFlag, Name: "--memory"}}},
		HostCPUs:   2,
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Resolve(in); err != nil {
			b.Fatal(err)
		}
	}
}
