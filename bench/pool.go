package main

import (
	"fmt"
	"time"
)

// poolCases measure a new sandbox taken from a filled pool (issue 24). Each timed sbx run
// starts from a full pool, made untimed beforehand; after it, "sbx pool fill" waits for the
// detached refill the claim started, so the docker side never runs beside a fill. The refill
// is not in the sbx figure: the command does not wait for it, which is the point of the pool.
func (b *bench) poolCases() []Case {
	pooled := func(args ...string) error {
		c := b.sbxCmd(args...)
		c.Env = append(c.Env[:len(c.Env):len(c.Env)], "SBX_POOL=1")
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("sbx %v: %v: %s", args, err, out)
		}
		return nil
	}
	timedPooled := func(args ...string) (time.Duration, error) {
		c := b.sbxCmd(args...)
		c.Env = append(c.Env[:len(c.Env):len(c.Env)], "SBX_POOL=1")
		return timed(c)
	}
	ref := func(int) (time.Duration, error) {
		return timed(docker(append(append([]string{"run", "--rm"}, b.hardening()...), b.image, "true")...))
	}
	drain := func() { _ = pooled("pool", "drain", "--all") }
	return []Case{
		{Name: "pool: cold exec", SbxCmd: "sbx exec -n NEW -- true (pool: 1, filled)", RefCmd: "docker run --rm HARDENING IMAGE true", Runs: 10, Ratio: 0.3,
			Sbx: func(i int) (time.Duration, error) {
				if err := pooled("pool", "fill"); err != nil {
					return 0, err
				}
				n := b.name(fmt.Sprintf("pool%d", i))
				d, err := timedPooled("exec", "-n", n, "--", "true")
				_, _ = b.sbxOut("rm", "-f", n)
				if ferr := pooled("pool", "fill"); err == nil {
					err = ferr
				}
				return d, err
			},
			Docker: ref, Done: drain},
		{Name: "pool: throwaway task", SbxCmd: "sbx exec --rm -- true (pool: 1, filled)", RefCmd: "docker run --rm HARDENING IMAGE true", Runs: 10, Ratio: 0.4,
			Sbx: func(int) (time.Duration, error) {
				if err := pooled("pool", "fill"); err != nil {
					return 0, err
				}
				d, err := timedPooled("exec", "--rm", "--", "true")
				if ferr := pooled("pool", "fill"); err == nil {
					err = ferr
				}
				return d, err
			},
			Docker: ref, Done: drain},
	}
}
