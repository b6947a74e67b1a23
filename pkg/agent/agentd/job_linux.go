package agentd

import (
	"bytes"
	"strconv"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/agent"

	"golang.org/x/sys/unix"
)

// proc is what the agent reads of a process in /proc/PID/stat.
type proc struct {
	state           string
	ppid, pgid, sid int
	start           uint64 // in clock ticks since boot: with the pid, names one process
	ok              bool
}

// procs is every process in the sandbox by pid; empty when /proc cannot be read (out of
// descriptors).
func procs() map[int]proc {
	table := map[int]proc{}
	_ = readDir("/proc", func(name string) {
		pid, err := strconv.Atoi(name)
		if err != nil {
			return
		}
		if e := stat(pid); e.ok {
			table[pid] = e
		}
	})
	return table
}

// readDir calls fn with each name in dir, through raw descriptors: the runtime's file
// poller would hold descriptors of its own.
func readDir(dir string, fn func(string)) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	buf := make([]byte, 32<<10)
	var names []string
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
		for _, name := range names {
			fn(name)
		}
	}
}

func stat(pid int) proc {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return proc{}
	}
	defer unix.Close(fd)
	var buf [2048]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil || n <= 0 {
		return proc{}
	}
	data := buf[:n]
	i := bytes.LastIndexByte(data, ')') // the name may hold spaces and parentheses
	if i < 0 || i+2 > len(data) {
		return proc{}
	}
	f := bytes.Fields(data[i+2:])
	if len(f) < 20 || len(f[0]) != 1 {
		return proc{}
	}
	num := func(b []byte) int { v, _ := strconv.Atoi(string(b)); return v }
	start, _ := strconv.ParseUint(string(f[19]), 10, 64)
	return proc{state: string(f[0]), ppid: num(f[1]), pgid: num(f[2]), sid: num(f[3]), start: start, ok: true}
}

func sigAll(pids []int, sig unix.Signal) {
	for _, pid := range pids {
		_ = unix.Kill(pid, sig)
	}
}

type phase int

const (
	running phase = iota
	terminating
	finished
)

// job is a command's processes, from its start until the agent has ended what was left of
// them and reaped the command: until then the command's pid, and so its group's and
// session's IDs, cannot be reused (a zombie keeps it).
type job struct {
	c        *conn
	pid      int
	grace    time.Duration
	start    uint64
	status   int
	exited   bool
	phase    phase
	timedOut bool
	marked   map[int]uint64 // the start of each process TERM or STOP went to
	timers   []*timer
}

func newJob(c *conn, pid int, timeout, grace time.Duration) *job {
	j := &job{c: c, pid: pid, grace: grace, start: stat(pid).start, marked: map[int]uint64{}}
	var t *timer
	if timeout > 0 {
		t = c.s.later(timeout, j.expire)
	}
	j.timers = []*timer{t}
	c.s.jobs[pid] = j
	return j
}

// members are the processes in table that belong to the command (see the package doc).
func (j *job) members(table map[int]proc) map[int]bool {
	found := map[int]bool{}
	for p, e := range table {
		if e.pgid == j.pid || e.sid == j.pid {
			found[p] = true
		}
	}
	if _, ok := table[j.pid]; ok {
		found[j.pid] = true
	}
	for p, st := range j.marked {
		if e, ok := table[p]; ok && e.start == st {
			found[p] = true
		}
	}
	kids := map[int][]int{}
	for p, e := range table {
		kids[e.ppid] = append(kids[e.ppid], p)
	}
	todo := make([]int, 0, len(found))
	for p := range found {
		todo = append(todo, p)
	}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, k := range kids[p] {
			if !found[k] {
				found[k] = true
				todo = append(todo, k)
			}
		}
	}
	delete(found, 1)
	delete(found, j.c.s.mypid)
	return found
}

// live are the members that have not exited (a zombie only waits for its parent).
func (j *job) live(table map[int]proc) []int {
	var left []int
	for p := range j.members(table) {
		if table[p].state != "Z" {
			left = append(left, p)
		}
	}
	return left
}

func (j *job) expire() {
	j.timedOut = true
	j.c.send(frame(agent.FrameTimeout, nil))
	j.end()
}

// end sends TERM to what belongs to the command, and KILL after the grace period to what
// still does.
func (j *job) end() {
	if j.phase != running {
		return
	}
	table := procs()
	left := j.live(table)
	if len(left) == 0 && len(table) > 0 {
		j.done(false)
		return
	}
	j.phase = terminating
	for _, p := range left {
		j.marked[p] = table[p].start
	}
	// The group first, in one step: signalled one by one, a shell could see its child die of
	// TERM and go on (even exec its next command) before its own TERM came.
	sigAll(append([]int{-j.pid}, left...), unix.SIGTERM)
	cancel(j.timers[0])
	j.timers = []*timer{j.c.s.later(j.grace, j.kill), j.c.s.later(pollEvery, j.poll)}
}

func (j *job) poll() {
	if j.phase != terminating {
		return
	}
	table := procs()
	if len(table) > 0 && len(j.live(table)) == 0 {
		j.done(false)
		return
	}
	j.timers = append(j.timers, j.c.s.later(pollEvery, j.poll))
}

// kill stops what belongs to the command, until no new process shows up, then KILLs it, so
// nothing forks away.
func (j *job) kill() {
	if j.phase != terminating {
		return
	}
	stopped := map[int]uint64{}
	for range 16 {
		table := procs()
		var fresh []int
		for _, p := range j.live(table) {
			if st, ok := stopped[p]; !ok || st != table[p].start {
				fresh = append(fresh, p)
			}
		}
		if len(fresh) == 0 {
			break
		}
		for _, p := range fresh {
			stopped[p] = table[p].start
			j.marked[p] = table[p].start
		}
		sigAll(fresh, unix.SIGSTOP)
	}
	all := []int{-j.pid}
	for p := range stopped {
		all = append(all, p)
	}
	sigAll(all, unix.SIGKILL)
	j.done(true)
}

func (j *job) done(killed bool) {
	j.phase = finished
	for _, t := range j.timers {
		cancel(t)
	}
	j.release()
	c := j.c
	if !c.reported {
		drain := ExitDrain
		if killed || j.timedOut {
			drain = KillDrain
		}
		c.s.later(drain, func() { c.s.guard(c, -1, func() error { c.force(); return nil }) })
	}
}

// exit takes the command's exit code.
func (j *job) exit(code int) {
	j.status, j.exited = code, true
	c := j.c
	if !c.hasStatus {
		c.status, c.hasStatus = code, true
		c.finish()
	}
	switch j.phase {
	case running:
		j.end()
	case finished:
		j.release()
	}
}

// release reaps the command once the agent is done with its IDs, if it has exited.
func (j *job) release() {
	s := j.c.s
	if j.exited && s.jobs[j.pid] == j {
		delete(s.jobs, j.pid)
		_, _ = unix.Wait4(j.pid, nil, unix.WNOHANG, nil)
	}
}

// used notes that a client came (c) or went (nil): the sandbox was in use just now, however
// short the use was next to the idle checks' interval.
func (s *server) used(c *conn) {
	s.idleSince = s.now()
	if c != nil {
		s.clients[c] = true
	}
}

// busy says whether the sandbox is in use: a client connected (sbx holds a lease while it
// works in the sandbox, port forwards included: see idleTick), or a process other than init,
// the agent and its spare shim (commands, background processes, shell sessions, the
// engine's execs).
func (s *server) busy() bool {
	if len(s.clients) > 0 {
		return true
	}
	for pid, e := range procs() {
		if pid != 1 && pid != s.mypid && (s.spare == nil || pid != s.spare.pid) && e.state != "Z" {
			return true
		}
	}
	return false
}

// leased says whether an sbx on the host holds the sandbox's lease (a shared flock on
// idle.lock): a command, a copy or a port forward in progress. With keep, a free lock stays
// taken, so no sbx can start using the sandbox until the agent has exited.
func (s *server) leased(keep bool) bool {
	if s.idleLock < 0 {
		return false // without idle stop the agent has no lock to ask; sbx asks the lock itself
	}
	if unix.Flock(s.idleLock, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return true
	}
	if !keep {
		_ = unix.Flock(s.idleLock, unix.LOCK_UN)
	}
	return false
}

// idleTick stops the sandbox (the agent, its main process, exits) once it was idle for
// IdleStop.
func (s *server) idleTick() {
	now := s.now()
	idle := s.opts.IdleStop
	switch {
	case s.busy() || s.leased(false):
		s.idleSince = now
	case now.Sub(s.idleSince) >= idle && !s.leased(true):
		// The lease is the agent's now: an sbx that comes meanwhile waits for the exit and
		// then finds the sandbox stopped, and starts it.
		s.logf("idle for %ds (idleStop); stopping the sandbox", int(now.Sub(s.idleSince).Seconds()))
		s.stop = true
		return
	}
	s.later(max(250*time.Millisecond, min(idle/4, 5*time.Second)), s.idleTick)
}

// idleStatus answers a status query: "busy" while the sandbox is in use, else "off" without
// idle stop, else the milliseconds left until it stops. Busy comes first because sbx asks
// whether a sandbox is in use before it changes the layers under it (sbx discard, apply).
func (s *server) idleStatus() string {
	if s.busy() || s.leased(false) {
		return "busy"
	}
	if s.opts.IdleStop == 0 {
		return "off"
	}
	return strconv.FormatInt(max(0, (s.opts.IdleStop-s.now().Sub(s.idleSince)).Milliseconds()), 10)
}
