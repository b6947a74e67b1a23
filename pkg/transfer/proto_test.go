package transfer

import (
	"strings"
	"testing"
)

func TestProtoWriterFailure(t *testing.T) {
	for _, tt := range []struct {
		name, out, messages string
		want                Error
	}{
		{name: "read-only", out: "sbx-cp error rofs /workspace\n", want: Error{Kind: ReadOnly, Path: "/w/x", Mount: "/workspace"}},
		{name: "symlink, control characters dropped", out: "sbx-cp error symlink /etc/\x1b[31mpasswd\n",
			want: Error{Kind: Symlink, Path: "/w/x", Target: "/etc/passwd"}},
		{name: "missing parent names it", out: "sbx-cp error nodir /w\n", want: Error{Kind: NoDir, Path: "/w"}},
		{name: "only the first error counts", out: "sbx-cp error incomplete\nsbx-cp error tar 2\n", want: Error{Kind: Incomplete, Path: "/w/x"}},
		{name: "foreign owner under -a", out: "sbx-cp ready\nsbx-cp error tar 2\n",
			messages: "tar: item: Cannot change ownership to uid 501, gid 20: Operation not permitted\ntar: Exiting with failure status due to previous errors\n",
			want:     Error{Kind: Owner, Path: "/w/x", Detail: "the sandbox user cannot give files to uid 501, gid 20 (it has no capabilities; -a keeps an owner only when it is the sandbox user)"}},
		{name: "full file system", out: "sbx-cp error tar 2\n", messages: "tar: item: Wrote only 8704 of 10240 bytes\n",
			want: Error{Kind: NoSpace, Path: "/w/x"}},
		{name: "other tar failures keep tar's words", out: "sbx-cp error tar 2\n", messages: "tar: item/x: Cannot open: Is a directory\n",
			want: Error{Kind: Failed, Path: "/w/x", Detail: "tar in the sandbox: exit status 2: tar: item/x: Cannot open: Is a directory"}},
		{name: "unknown kinds are failures", out: "sbx-cp error busy /w\n", want: Error{Kind: Failed, Path: "/w/x", Detail: "busy /w"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newProtoWriter(nil)
			// Split writes: lines may arrive in pieces.
			for _, c := range []byte(tt.out) {
				_, _ = p.Write([]byte{c})
			}
			got := p.failure("box", "/w/x", tt.messages)
			tt.want.Sandbox = "box"
			if got == nil || *got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	p := newProtoWriter(nil)
	_, _ = p.Write([]byte("sbx-cp ready\nsbx-cp done\n"))
	if p.failure("box", "/x", "") != nil || !p.finished() {
		t.Error("a clean run reports a failure")
	}
	select {
	case <-p.ready:
	default:
		t.Error("ready not signalled")
	}
}

func TestProtoWriterBoundsWhatItKeeps(t *testing.T) {
	var totals []int64
	p := newProtoWriter(func(b int64, n int) { totals = append(totals, b, int64(n)) })
	_, _ = p.Write([]byte(strings.Repeat("x", 1<<20) + "\n"))
	for range 100 {
		_, _ = p.Write([]byte("tar: " + strings.Repeat("y", 1000) + "\n"))
	}
	_, _ = p.Write([]byte("sbx-cp total 1234 5\nsbx-cp total nonsense\n"))
	if n := len(p.text()); n > maxOther+maxProtoLine+1 {
		t.Errorf("kept %d bytes of output", n)
	}
	if len(totals) != 2 || totals[0] != 1234 || totals[1] != 5 {
		t.Errorf("totals %v", totals)
	}
}
