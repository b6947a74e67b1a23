package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sbx-sandbox/sbx/pkg/config"
)

// defaultSeccomp is the seccomp profile sandboxes get when none is configured: moby's current
// default, sent with every create instead of leaving the choice to the engine. An older engine's
// built-in default can be far behind (Docker 20.10 still allows io_uring, which Docker 25
// blocked), and a sandbox's filter should not depend on which engine it lands on.
var defaultSeccomp = sync.OnceValues(func() (string, string) {
	return encodeSeccomp(seccomp.DefaultProfile(), "builtin:")
})

// gvisorSeccomp is defaultSeccomp for a sandbox under gVisor, whose runsc applies the filter
// itself (--oci-seccomp) to every process the agent starts, and differs from libseccomp in
// two ways (runsc 2022-12-19, measured): it ignores a rule's errno, answering EPERM, and it
// knows system calls by gVisor's own names. So clone3, which moby answers with ENOSYS for
// glibc to fall back to clone (whose flags the filter checks), is allowed: gVisor has no
// clone3 and answers ENOSYS itself (with EPERM every new thread failed, python's "can't start
// new thread"); the namespaces a gVisor that has it would make are gVisor's own. And each
// allowed call gVisor names otherwise is allowed under that name too: pselect6 is gVisor's
// "pselect" (without, select(3) and bash's read -t failed with EPERM).
var gvisorSeccomp = sync.OnceValues(func() (string, string) {
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
	return encodeSeccomp(p, "builtin-gvisor:")
})

// gvisorSyscallNames are the system calls of moby's profile that gVisor's syscall table
// names otherwise: the Linux name, then gVisor's.
var gvisorSyscallNames = [][2]string{{"pselect6", "pselect"}}

// encodeSeccomp is profile p as the engine takes it, and its ID: prefix and a digest.
func encodeSeccomp(p *seccomp.Seccomp, prefix string) (string, string) {
	data, err := json.Marshal(p)
	if err != nil {
		panic("encoding the built-in seccomp profile: " + err.Error())
	}
	sum := sha256.Sum256(data)
	return string(data), prefix + hex.EncodeToString(sum[:8])
}

// seccompFor is the built-in profile for a sandbox with isolation, and its ID, a digest of
// its content, so a new profile in a new sbx shows as a configuration change of existing
// sandboxes.
func seccompFor(isolation string) (profile, id string) {
	if isolation == config.IsolationGVisor {
		return gvisorSeccomp()
	}
	return defaultSeccomp()
}
