package main

import (
	"fmt"
	"sync"
	"time"
)

// gvisorCases run exec under gVisor (isolation: gvisor) against the same under the default
// runtime, both through sbx: warm in a running sandbox, cold in a new one. Both run commands
// through sbx's agent (a gVisor sandbox's binds its own socket), so the warm case measures
// what gVisor adds to starting a process: under the ptrace platform each exec costs a new
// address space in gVisor's kernel (the agent's shim, a Go program, starts ahead).
func (b *bench) gvisorCases() []Case {
	gv, warm := b.name("gvwarm"), b.name("warm")
	var once sync.Once
	var setupErr error
	prepare := func() error {
		once.Do(func() {
			if out, err := b.sbxOut("create", "-n", gv, "--isolation", "gvisor"); err != nil {
				setupErr = fmt.Errorf("%v: %s", err, out)
			}
		})
		return setupErr
	}
	cold := func(prefix string, i int, iso string) (time.Duration, error) {
		n := b.name(fmt.Sprintf("%s%d", prefix, i))
		defer b.sbxOut("rm", "-f", n)
		c := b.sbxCmd("exec", "-n", n, "--", "true")
		c.Env = append(c.Env, "SBX_ISOLATION="+iso)
		return timed(c)
	}
	return []Case{
		{Name: "gvisor: warm exec", SbxCmd: "sbx exec -- true (isolation: gvisor)", RefCmd: "sbx exec -- true (isolation: container)", Runs: 20, Ratio: 2.0, Settle: warmSettle,
			Sbx: func(int) (time.Duration, error) {
				if err := prepare(); err != nil {
					return 0, err
				}
				return timed(b.sbxCmd("exec", "-n", gv, "--", "true"))
			},
			Docker: func(int) (time.Duration, error) { return timed(b.sbxCmd("exec", "-n", warm, "--", "true")) }},
		{Name: "gvisor: cold exec", SbxCmd: "sbx exec -n NEW -- true (isolation: gvisor)", RefCmd: "sbx exec -n NEW -- true (isolation: container)", Runs: 6, Ratio: 2.0,
			Sbx:    func(i int) (time.Duration, error) { return cold("gvcold", i, "gvisor") },
			Docker: func(i int) (time.Duration, error) { return cold("rccold", i, "container") }},
	}
}
