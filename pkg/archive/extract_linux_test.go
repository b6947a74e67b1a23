package archive

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
)

func TestExtractNeverRestoresXattrs(t *testing.T) {
	archive := tarOf(t, ent{name: "base", typ: '0', mode: 0o644, body: "x",
		pax: map[string]string{"SCHILY.xattr.user.sbx": "evil", "SCHILY.xattr.security.capability": "cap"}})
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := Extract(context.Background(), bytes.NewReader(archive), dst, ExtractOptions{Base: "base"}); err != nil {
		t.Fatal(err)
	}
	n, err := syscall.Listxattr(dst, make([]byte, 1024))
	if err != nil && !errors.Is(err, syscall.ENOTSUP) {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("extracted file carries %d bytes of xattr names", n)
	}
}
