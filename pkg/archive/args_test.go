package archive

import (
	"errors"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestParseCopyArgs(t *testing.T) {
	for _, tc := range []struct {
		src, dst string
		want     CopyArgs
	}{
		{"web:/etc/hosts", "out", CopyArgs{
			Src: Location{Sandbox: "web", Path: "/etc/hosts"},
			Dst: Location{Path: "out"}}},
		{"a.txt", "web:/tmp/b.txt", CopyArgs{
			Src: Location{Path: "a.txt"},
			Dst: Location{Sandbox: "web", Path: "/tmp/b.txt"}}},
		{"web:src", ".", CopyArgs{
			Src: Location{Sandbox: "web", Path: "/workspace/src"},
			Dst: Location{Path: ".", Contents: true}}},
		{":out/", "./dir/", CopyArgs{
			Src: Location{Default: true, Path: "/workspace/out", TrailingSlash: true},
			Dst: Location{Path: "dir", TrailingSlash: true}}},
		{"dir/.", ":/tmp/", CopyArgs{
			Src: Location{Path: "dir", Contents: true},
			Dst: Location{Default: true, Path: "/tmp", TrailingSlash: true}}},
		{"web:.", "-", CopyArgs{
			Src: Location{Sandbox: "web", Path: "/workspace", Contents: true},
			Dst: Location{Stream: true}}},
		{"-", "web:/tmp", CopyArgs{
			Src: Location{Stream: true},
			Dst: Location{Sandbox: "web", Path: "/tmp"}}},
		{"web:../etc//./x/", "o", CopyArgs{
			Src: Location{Sandbox: "web", Path: "/etc/x", TrailingSlash: true},
			Dst: Location{Path: "o"}}},
		{"./a:b", "web:/x", CopyArgs{ // a local name with a colon
			Src: Location{Path: "a:b"},
			Dst: Location{Sandbox: "web", Path: "/x"}}},
		{"/tmp/a:b", "my_box-1.x:/x", CopyArgs{
			Src: Location{Path: "/tmp/a:b"},
			Dst: Location{Sandbox: "my_box-1.x", Path: "/x"}}},
		{"../up:x", "web:/x", CopyArgs{
			Src: Location{Path: "../up:x"},
			Dst: Location{Sandbox: "web", Path: "/x"}}},
		{"web:a:b", "o", CopyArgs{ // only the first colon separates the name
			Src: Location{Sandbox: "web", Path: "/workspace/a:b"},
			Dst: Location{Path: "o"}}},
	} {
		got, err := ParseCopyArgs(tc.src, tc.dst)
		if err != nil {
			t.Errorf("ParseCopyArgs(%q, %q): %v", tc.src, tc.dst, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseCopyArgs(%q, %q) =\n %+v\nwant\n %+v", tc.src, tc.dst, got, tc.want)
		}
		if got.Into() != tc.want.Dst.InSandbox() {
			t.Errorf("ParseCopyArgs(%q, %q).Into() = %v", tc.src, tc.dst, got.Into())
		}
	}
}

func TestParseCopyArgsUsageErrors(t *testing.T) {
	for _, tc := range []struct{ src, dst, want string }{
		{"a", "b", "must be a sandbox path"},
		{"-", "-", "must be a sandbox path"},
		{"-", "b", "must be a sandbox path"},
		{"./a:b", "/c:d", "must be a sandbox path"},
		{"web:/a", "db:/b", "from one sandbox to another"},
		{":/a", "web:/b", "from one sandbox to another"},
		{"", "web:/x", "SRC is empty"},
		{"web:/x", "", "DST is empty"},
		{"web:", "out", "no path after the colon"},
		{"a b:/x", "out", "not a sandbox name"},
		{"-web:/x", "out", "not a sandbox name"},
		{"web:/x\x00y", "out", "NUL"},
	} {
		_, err := ParseCopyArgs(tc.src, tc.dst)
		var ue *errs.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseCopyArgs(%q, %q) = %v; want a usage error with %q", tc.src, tc.dst, err, tc.want)
		}
		if errs.ExitCode(err) != errs.CodeUsage {
			t.Errorf("ParseCopyArgs(%q, %q): exit code %d", tc.src, tc.dst, errs.ExitCode(err))
		}
	}
}
