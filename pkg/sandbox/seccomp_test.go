package sandbox

import (
	"encoding/json"
	"flag"
	"os"
	"slices"
	"testing"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

var updateSeccomp = flag.Bool("update", false, "rewrite the built-in seccomp profiles (seccomp/*.json)")

// buildGVisorSeccomp is moby's default for a sandbox under gVisor, whose runsc applies the
// filter itself (--oci-seccomp) to every process the agent starts, and differs from
// libseccomp in two ways (runsc 2022-12-19, measured): it ignores a rule's errno, answering
// EPERM, and it knows system calls by gVisor's own names. So clone3, which moby answers with
// ENOSYS for glibc to fall back to clone (whose flags the filter checks), is allowed: gVisor
// has no clone3 and answers ENOSYS itself (with EPERM every new thread failed, python's
// "can't start new thread"); the namespaces a gVisor that has it would make are gVisor's own.
// And each allowed call gVisor names otherwise is allowed under that name too: pselect6 is
// gVisor's "pselect" (without, select(3) and bash's read -t failed with EPERM).
func buildGVisorSeccomp() *seccomp.Seccomp {
	p := seccomp.DefaultProfile()
	for i, sc := range p.Syscalls {
		if slices.Equal(sc.Names, []string{"clone3"}) && sc.Action == specs.ActErrno {
			p.Syscalls[i].Action, p.Syscalls[i].ErrnoRet = specs.ActAllow, nil
		}
		for _, n := range gvisorSyscallNames {
			if slices.Contains(sc.Names, n[0]) {
				p.Syscalls[i].Names = append(p.Syscalls[i].Names, n[1])
			}
		}
	}
	return p
}

// gvisorSyscallNames are the system calls of moby's profile that gVisor's syscall table
// names otherwise: the Linux name, then gVisor's.
var gvisorSyscallNames = [][2]string{{"pselect6", "pselect"}}

// The built-in profiles are what moby's default (in go.mod's version) and buildGVisorSeccomp
// make of it, byte for byte: a new moby fails this until go test -run TestBuiltinSeccomp
// ./pkg/sandbox -update rewrites them (and every sandbox then shows a changed config).
func TestBuiltinSeccompProfilesAreCurrent(t *testing.T) {
	for _, tt := range []struct {
		file, embedded string
		build          func() *seccomp.Seccomp
	}{
		{"seccomp/default.json", defaultSeccompJSON, seccomp.DefaultProfile},
		{"seccomp/gvisor.json", gvisorSeccompJSON, buildGVisorSeccomp},
	} {
		want, err := json.Marshal(tt.build())
		if err != nil {
			t.Fatal(err)
		}
		if *updateSeccomp {
			if err := os.WriteFile(tt.file, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if tt.embedded != string(want) {
			t.Errorf("%s is not what moby's default makes (%d bytes, want %d): go test -run TestBuiltinSeccomp ./pkg/sandbox -update", tt.file, len(tt.embedded), len(want))
		}
	}
}
