// Command bench measures sbx against the docker CLI on the same engine in the same run. Each
// case interleaves its two sides (A B A B ...) so load on this shared machine hits both alike,
// and reports medians and their ratio against a target. Run it with "make bench".
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Case is one comparison. Docker is nil for absolute cases.
type Case struct {
	Name   string
	SbxCmd string
	RefCmd string
	Runs   int
	Ratio  float64 // target sbx/docker; 0 for absolute cases
	MaxMs  float64 // target absolute median for cases without a reference
	Sbx    func(i int) (time.Duration, error)
	Docker func(i int) (time.Duration, error)
	Done   func() // removes what the case left running, if anything
	// Settle is a pause before each run, so that what the previous run left working in the
	// background (an agent starting its next spare shim, the engine cleaning up an exec) does
	// not land on the next run, which may be the other side's.
	Settle time.Duration
}

// Result is one case's outcome; raw timings are kept for the JSON file.
type Result struct {
	Name      string    `json:"name"`
	SbxCmd    string    `json:"sbx"`
	RefCmd    string    `json:"docker,omitempty"`
	SbxMs     []float64 `json:"sbxRunsMs"`
	DockerMs  []float64 `json:"dockerRunsMs,omitempty"`
	SbxMed    float64   `json:"sbxMedianMs"`
	DockerMed float64   `json:"dockerMedianMs,omitempty"`
	Ratio     float64   `json:"ratio,omitempty"`
	Target    string    `json:"target"`
	Pass      bool      `json:"pass"`
	Error     string    `json:"error,omitempty"`
}

type bench struct {
	sbx     string
	project string
	env     []string
	image   string
	run     string
	forward *exec.Cmd // the sbx port-forward of the port-forward cases
}

func main() {
	sbxBin := flag.String("sbx", "bin/sbx", "sbx binary to measure")
	out := flag.String("out", "bench", "directory for RESULTS.md and results.json")
	only := flag.String("only", "", "run only cases whose name contains this")
	flag.Parse()

	b, err := setup(*sbxBin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	defer b.cleanup()

	var results []Result
	for _, c := range b.cases() {
		if *only != "" && !strings.Contains(c.Name, *only) {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s (%d runs)\n", c.Name, c.Runs)
		r := runCase(c)
		if c.Done != nil {
			c.Done()
		}
		fmt.Fprintf(os.Stderr, "bench:   sbx %.1f ms, docker %.1f ms, ratio %.2f, target %s: %s %s\n", r.SbxMed, r.DockerMed, r.Ratio, r.Target, passWord(r.Pass), r.Error)
		results = append(results, r)
	}
	profile := b.profileWarmExec()
	fmt.Fprintln(os.Stderr, "bench: go test -bench for the pure parts")
	gobench, err := exec.Command("go", "test", "-run", "^$", "-bench", ".", "-benchmem", "./pkg/config", "./pkg/sandbox", "./pkg/archive").CombinedOutput()
	if err != nil {
		gobench = append(gobench, []byte("go test -bench failed: "+err.Error()+"\n")...)
	}
	if err := write(*out, results, profile+"\n## Pure parts (`go test -bench -benchmem`)\n\n```\n"+string(gobench)+"```\n", b.engineVersion()); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		b.cleanup() // os.Exit skips the deferred one
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s and %s\n", filepath.Join(*out, "RESULTS.md"), filepath.Join(*out, "results.json"))
}

func setup(sbxBin string) (*bench, error) {
	abs, err := filepath.Abs(sbxBin)
	if err != nil {
		return nil, err
	}
	home, err := os.MkdirTemp("", "sbx-bench-home-")
	if err != nil {
		return nil, err
	}
	project := filepath.Join(home, "project")
	if err := os.MkdirAll(project, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(home, 0o755); err != nil {
		return nil, err
	}
	// workspace none so copies land in a volume, where docker cp can write too.
	if err := os.WriteFile(filepath.Join(project, ".sbx.yaml"), []byte("workspace: none\n"), 0o644); err != nil {
		return nil, err
	}
	tag := make([]byte, 3)
	_, _ = rand.Read(tag)
	b := &bench{sbx: abs, project: project, image: "sbx-sandbox:bookworm-slim", run: fmt.Sprintf("bench%x", tag),
		env: append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
			"XDG_STATE_HOME="+filepath.Join(home, ".state"), "NO_COLOR=1")}
	b.env = append(b.env, "SBX_TEST_LABEL="+b.run)
	if out, err := b.sbxOut("create", "-n", b.name("warm")); err != nil {
		return nil, fmt.Errorf("creating the warm sandbox: %v\n%s", err, out)
	}
	return b, nil
}

func (b *bench) name(s string) string { return b.run + "-" + s }

func (b *bench) cleanup() {
	b.stopForward()
	_ = docker("rm", "-f", b.name("published")).Run()
	_, _ = b.sbxOut("prune", "-f", "--all", "--filter", "name="+b.run+"-*")
	_ = docker("rmi", busyboxTag).Run()
}

func (b *bench) sbxCmd(args ...string) *exec.Cmd {
	c := exec.Command(b.sbx, args...)
	c.Dir, c.Env = b.project, b.env
	return c
}

func (b *bench) sbxOut(args ...string) (string, error) {
	out, err := b.sbxCmd(args...).CombinedOutput()
	return string(out), err
}

// timed runs c with output discarded and returns its wall time.
func timed(c *exec.Cmd) (time.Duration, error) {
	var errb bytes.Buffer
	c.Stderr = &errb
	start := time.Now()
	err := c.Run()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%s: %v: %s", strings.Join(c.Args, " "), err, strings.TrimSpace(errb.String()))
	}
	return d, nil
}

func docker(args ...string) *exec.Cmd { return exec.Command("docker", args...) }

// hardening is the docker run equivalent of sbx's defaults.
func (b *bench) hardening() []string {
	return []string{"--read-only", "--tmpfs", "/tmp:size=256m,nosuid,nodev,noexec", "--tmpfs", "/var/tmp:size=256m,nosuid,nodev,noexec",
		"--tmpfs", "/run:size=256m,nosuid,nodev,noexec", "--cap-drop", "ALL", "--security-opt", "no-new-privileges:true",
		"--network", "none", "--pids-limit", "256", "--memory", "1g", "--memory-swap", "1g", "--cpus", "1", "--init",
		"--user", "1000:1000", "--ulimit", "nofile=4096:4096", "--ulimit", "core=0", "-e", "LANG=C.UTF-8"}
}

// warmSettle is the pause before each run of a warm exec case (Case.Settle): a gVisor
// agent's next spare shim takes ~100 ms of CPU after each command, which in back-to-back
// runs landed on the runc side of the gVisor case (94.9 ms against 49.3 ms alone).
const warmSettle = 300 * time.Millisecond

func (b *bench) cases() []Case {
	warm := b.name("warm")
	ctr := "sbx-" + warm
	cs := []Case{
		{Name: "warm exec", SbxCmd: "sbx exec -- true", RefCmd: "docker exec CTR true", Runs: 30, Ratio: 0.25, Settle: warmSettle,
			Sbx:    func(int) (time.Duration, error) { return timed(b.sbxCmd("exec", "-n", warm, "--", "true")) },
			Docker: func(int) (time.Duration, error) { return timed(docker("exec", ctr, "true")) }},
		{Name: "warm exec with output", SbxCmd: "sbx exec -- head -c 10M /dev/zero", RefCmd: "docker exec CTR head -c 10M /dev/zero", Runs: 15, Ratio: 0.8,
			Sbx: func(int) (time.Duration, error) {
				return timed(b.sbxCmd("exec", "-n", warm, "--", "head", "-c", "10M", "/dev/zero"))
			},
			Docker: func(int) (time.Duration, error) { return timed(docker("exec", ctr, "head", "-c", "10M", "/dev/zero")) }},
		{Name: "cold exec", SbxCmd: "sbx exec -n NEW -- true", RefCmd: "docker run --rm HARDENING IMAGE true", Runs: 8, Ratio: 1.0,
			Sbx: func(i int) (time.Duration, error) {
				n := b.name(fmt.Sprintf("cold%d", i))
				defer b.sbxOut("rm", "-f", n)
				return timed(b.sbxCmd("exec", "-n", n, "--", "true"))
			},
			Docker: func(int) (time.Duration, error) {
				return timed(docker(append(append([]string{"run", "--rm"}, b.hardening()...), b.image, "true")...))
			}},
		b.lsCase(),
		b.pruneCase(),
		{Name: "startup: sbx --version", SbxCmd: "sbx --version", Runs: 30, MaxMs: 20,
			Sbx: func(int) (time.Duration, error) { return timed(b.sbxCmd("--version")) }},
		{Name: "startup: sbx explain --check", SbxCmd: "sbx explain --check (no engine call)", Runs: 30, MaxMs: 20,
			Sbx: func(int) (time.Duration, error) { return timed(b.sbxCmd("explain", "--check")) }},
	}
	if b.hasCp() {
		cs = append(cs, b.copyCases()...)
	}
	cs = append(cs, b.poolCases()...)
	cs = append(cs, b.overlayCases()...)
	cs = append(cs, b.gvisorCases()...)
	cs = append(cs, b.busyboxCase())
	return append(append(cs, b.egressCase(), b.sshCase()), b.forwardCases()...)
}

func (b *bench) hasCp() bool { return b.sbxCmd("cp", "--help").Run() == nil }

// createMany makes n sandboxes named prefix-i, eight at a time.
func (b *bench) createMany(prefix string, n int) error {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if out, err := b.sbxOut("create", "-n", fmt.Sprintf("%s-%03d", prefix, i)); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("%v: %s", err, out)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func (b *bench) lsCase() Case {
	var once sync.Once
	var setupErr error
	prepare := func() error {
		once.Do(func() { setupErr = b.createMany(b.name("ls"), 99) }) // plus the warm one: 100
		return setupErr
	}
	return Case{Name: "ls (100 sandboxes)", SbxCmd: "sbx ls", RefCmd: "docker ps -a --filter label=dev.sbx.managed=true", Runs: 10, Ratio: 1.0,
		Sbx: func(int) (time.Duration, error) {
			if err := prepare(); err != nil {
				return 0, err
			}
			return timed(b.sbxCmd("ls", "--filter", "name="+b.run+"-*"))
		},
		Docker: func(int) (time.Duration, error) {
			if err := prepare(); err != nil {
				return 0, err
			}
			return timed(docker("ps", "-a", "--filter", "label=dev.sbx.managed=true", "--filter", "label=sbx.test="+b.run))
		}}
}

func (b *bench) pruneCase() Case {
	return Case{Name: "prune (50 sandboxes)", SbxCmd: "sbx prune --all -f", RefCmd: "for each: docker rm -f", Runs: 3, Ratio: 0.5,
		Sbx: func(i int) (time.Duration, error) {
			prefix := b.name(fmt.Sprintf("ps%d", i))
			if err := b.createMany(prefix, 50); err != nil {
				return 0, err
			}
			return timed(b.sbxCmd("prune", "--all", "-f", "--filter", "name="+prefix+"-*"))
		},
		Docker: func(i int) (time.Duration, error) {
			prefix := b.name(fmt.Sprintf("pd%d", i))
			if err := b.createMany(prefix, 50); err != nil {
				return 0, err
			}
			script := fmt.Sprintf("for i in $(seq -w 0 49); do docker rm -f sbx-%s-0$i >/dev/null; done", prefix)
			d, err := timed(exec.Command("bash", "-c", script))
			_, _ = b.sbxOut("prune", "-f", "--all", "--filter", "name="+prefix+"-*") // their volumes and state
			return d, err
		}}
}

func (b *bench) copyCases() []Case {
	cp := b.name("cp")
	ctr := "sbx-" + cp
	dir, _ := os.MkdirTemp("", "sbx-bench-cp-")
	big := filepath.Join(dir, "big.bin")
	tree := filepath.Join(dir, "tree")
	var once sync.Once
	var setupErr error
	prepare := func() error {
		once.Do(func() {
			if out, err := b.sbxOut("create", "-n", cp); err != nil {
				setupErr = fmt.Errorf("%v: %s", err, out)
				return
			}
			data := make([]byte, 100<<20)
			_, _ = rand.Read(data)
			if setupErr = os.WriteFile(big, data, 0o644); setupErr != nil {
				return
			}
			for i := 0; i < 2000; i++ {
				p := filepath.Join(tree, fmt.Sprintf("d%02d", i%40), fmt.Sprintf("f%04d.txt", i))
				_ = os.MkdirAll(filepath.Dir(p), 0o755)
				if setupErr = os.WriteFile(p, []byte(strings.Repeat("x", 100+i)), 0o644); setupErr != nil {
					return
				}
			}
			// Something to copy out on both sides.
			_, setupErr = timed(b.sbxCmd("cp", big, cp+":/workspace/big.bin"))
			if setupErr == nil {
				_, setupErr = timed(b.sbxCmd("cp", tree, cp+":/workspace/tree"))
			}
		})
		return setupErr
	}
	outDir := func(i int, side string) string { return filepath.Join(dir, fmt.Sprintf("out-%s-%d", side, i)) }
	in := func(src, dst string) func(int) (time.Duration, error) {
		return func(i int) (time.Duration, error) {
			if err := prepare(); err != nil {
				return 0, err
			}
			return timed(b.sbxCmd("cp", src, fmt.Sprintf("%s:/workspace/in%d-%s", cp, i, dst)))
		}
	}
	inRef := func(src, dst string) func(int) (time.Duration, error) {
		return func(i int) (time.Duration, error) {
			if err := prepare(); err != nil {
				return 0, err
			}
			return timed(docker("cp", src, fmt.Sprintf("%s:/workspace/ref%d-%s", ctr, i, dst)))
		}
	}
	out := func(src string) func(int) (time.Duration, error) {
		return func(i int) (time.Duration, error) {
			if err := prepare(); err != nil {
				return 0, err
			}
			dst := outDir(i, "sbx"+filepath.Base(src))
			defer os.RemoveAll(dst)
			return timed(b.sbxCmd("cp", cp+":"+src, dst))
		}
	}
	outRef := func(src string) func(int) (time.Duration, error) {
		return func(i int) (time.Duration, error) {
			if err := prepare(); err != nil {
				return 0, err
			}
			dst := outDir(i, "ref"+filepath.Base(src))
			defer os.RemoveAll(dst)
			return timed(docker("cp", ctr+":"+src, dst))
		}
	}
	return []Case{
		{Name: "copy in 100 MiB", SbxCmd: "sbx cp FILE NAME:/workspace/...", RefCmd: "docker cp FILE CTR:/workspace/... (volume)", Runs: 5, Ratio: 1.0, Sbx: in(big, "big"), Docker: inRef(big, "big")},
		{Name: "copy in 2000 files", SbxCmd: "sbx cp DIR NAME:/workspace/...", RefCmd: "docker cp DIR CTR:/workspace/...", Runs: 5, Ratio: 1.0, Sbx: in(tree, "tree"), Docker: inRef(tree, "tree")},
		{Name: "copy out 100 MiB", SbxCmd: "sbx cp NAME:/workspace/big.bin DST", RefCmd: "docker cp CTR:/workspace/big.bin DST", Runs: 5, Ratio: 1.0, Sbx: out("/workspace/big.bin"), Docker: outRef("/workspace/big.bin")},
		{Name: "copy out 2000 files", SbxCmd: "sbx cp NAME:/workspace/tree DST", RefCmd: "docker cp CTR:/workspace/tree DST", Runs: 5, Ratio: 1.0, Sbx: out("/workspace/tree"), Docker: outRef("/workspace/tree")},
	}
}

func runCase(c Case) Result {
	r := Result{Name: c.Name, SbxCmd: c.SbxCmd, RefCmd: c.RefCmd}
	for i := 0; i < c.Runs; i++ {
		time.Sleep(c.Settle)
		d, err := c.Sbx(i)
		if err != nil {
			r.Error = err.Error()
			return r
		}
		r.SbxMs = append(r.SbxMs, ms(d))
		if c.Docker != nil {
			time.Sleep(c.Settle)
			d, err := c.Docker(i)
			if err != nil {
				r.Error = err.Error()
				return r
			}
			r.DockerMs = append(r.DockerMs, ms(d))
		}
	}
	r.SbxMed = median(r.SbxMs)
	if c.Docker != nil {
		r.DockerMed = median(r.DockerMs)
		r.Ratio = r.SbxMed / r.DockerMed
		r.Target = fmt.Sprintf("≤ %s", strconv.FormatFloat(c.Ratio, 'f', -1, 64))
		r.Pass = r.Ratio <= c.Ratio
	} else {
		r.Target = fmt.Sprintf("≤ %.0f ms", c.MaxMs)
		r.Pass = r.SbxMed <= c.MaxMs
	}
	return r
}

// profileWarmExec records where a warm exec spends its time: the engine calls as --debug
// logs them, and the top of a CPU profile of the sbx process over many runs.
func (b *bench) profileWarmExec() string {
	var sb strings.Builder
	out, _ := b.sbxOut("--debug", "exec", "-n", b.name("warm"), "--", "true")
	sb.WriteString("Engine calls of one warm `sbx exec -- true` (`--debug`):\n\n```\n" + out + "```\n\n")
	dir, err := os.MkdirTemp("", "sbx-bench-prof-")
	if err != nil {
		return sb.String()
	}
	defer os.RemoveAll(dir)
	var profiles []string
	for i := 0; i < 40; i++ {
		p := filepath.Join(dir, fmt.Sprintf("exec%d.prof", i))
		c := b.sbxCmd("exec", "-n", b.name("warm"), "--", "true")
		c.Env = append(c.Env, "SBX_CPUPROFILE="+p)
		if c.Run() == nil {
			profiles = append(profiles, p)
		}
	}
	top, err := exec.Command("go", append([]string{"tool", "pprof", "-top", "-nodecount=15", b.sbx}, profiles...)...).CombinedOutput()
	if err != nil {
		return sb.String() + "(pprof failed: " + err.Error() + ")\n"
	}
	sb.WriteString(fmt.Sprintf("CPU profile of the sbx client over %d warm execs (`SBX_CPUPROFILE`, `go tool pprof -top`):\n\n```\n%s```\n", len(profiles), top))
	return sb.String()
}

func (b *bench) engineVersion() string {
	out, err := docker("version", "--format", "Docker {{.Server.Version}}, API {{.Server.APIVersion}}").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func write(dir string, results []Result, profile, engine string) error {
	now := time.Now().UTC().Format(time.RFC3339)
	data, err := json.MarshalIndent(map[string]any{"date": now, "engine": engine, "go": runtime.Version(), "cpus": runtime.NumCPU(), "cases": results}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# sbx benchmark results\n\nMeasured by `make bench` on %s: %s, %d CPUs, %s. Each case interleaves sbx and the\ndocker CLI run by run; medians in milliseconds. Raw timings are in `results.json`.\n\n", now, engine, runtime.NumCPU(), runtime.Version())
	md.WriteString("| case | sbx median | docker median | ratio | target | result |\n|---|---|---|---|---|---|\n")
	for _, r := range results {
		ref, ratio := "—", "—"
		if r.RefCmd != "" {
			ref, ratio = fmt.Sprintf("%.1f", r.DockerMed), fmt.Sprintf("%.2f", r.Ratio)
		}
		res := passWord(r.Pass)
		if r.Error != "" {
			res = "error: " + r.Error
		}
		fmt.Fprintf(&md, "| %s | %.1f | %s | %s | %s | %s |\n", r.Name, r.SbxMed, ref, ratio, r.Target, res)
	}
	md.WriteString("\nCommands compared:\n\n")
	for _, r := range results {
		fmt.Fprintf(&md, "- %s: `%s`", r.Name, r.SbxCmd)
		if r.RefCmd != "" {
			fmt.Fprintf(&md, " vs `%s`", r.RefCmd)
		}
		md.WriteString("\n")
	}
	md.WriteString("\n## Where the time goes\n\n" + profile)
	return os.WriteFile(filepath.Join(dir, "RESULTS.md"), []byte(md.String()), 0o644)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func passWord(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}
