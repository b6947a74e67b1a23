package sandboxtest

import (
	"os"
	"path/filepath"
	"testing"
)

// StaticBinary is an ELF file without an interpreter, as a static sbx is: enough for sbx to
// give sandboxes on any image the agent, on a fake engine.
func StaticBinary(t *testing.T) string {
	t.Helper()
	hdr := make([]byte, 64)
	copy(hdr, "\x7fELF\x02\x01\x01")       // 64-bit, little-endian, version 1
	hdr[16], hdr[18], hdr[20] = 2, 0x3e, 1 // ET_EXEC, x86-64, version 1
	hdr[52], hdr[54], hdr[58] = 64, 56, 64 // header, program and section header sizes
	path := filepath.Join(t.TempDir(), "sbx")
	if err := os.WriteFile(path, hdr, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}
