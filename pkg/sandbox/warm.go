package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/agent"
)

// A warm exec (Warm) runs a command in a running sandbox without asking the engine anything:
// the agent that answers on the socket sbx bound for the sandbox's current run is the proof
// that the sandbox runs, and a record sbx wrote when that run began says which container it
// is and what it was made with. Every start with an agent writes the record (recordStart), in
// sbx's state directory, never in the agent's directory (a sandbox under gVisor may write
// there). A warm exec takes the usual path (Ensure) on anything else: no record, a sandbox
// that is not current by Ensure's rule (Resolver.Drift), another engine, a claim that does not match, another agent version, a
// socket that is not the recorded one (the sandbox started again since, or was recreated),
// one that refuses (stopped), an agent that does not greet in time (paused: the engine
// accepts for it but it never answers), a lease taken while the agent stops the sandbox for
// idleness, or a throwaway sandbox left by a killed sbx, which the usual path removes.

// warmHello bounds the greeting on a warm exec: a paused sandbox's agent never greets, and
// the usual path resumes it.
var warmHello = 250 * time.Millisecond

// maxStartRecord bounds a start record, which holds the sandbox's labels.
const maxStartRecord = 1 << 20

// startRecord is what sbx knows of a sandbox's current run with an agent: written when the
// agent took its socket, at every start, under the name the sandbox was made under (its
// key: a pooled sandbox keeps its pool name's record once claimed).
type startRecord struct {
	ID     string            `json:"id"`
	Engine string            `json:"engine"` // the engine's address, as its client names it
	Image  string            `json:"image"`
	Labels map[string]string `json:"labels"`
	Socket agent.SocketID    `json:"socket"`
}

// startedPath is the start record of the sandbox made under key.
func (s *StateStore) startedPath(key string) string {
	return filepath.Join(s.Dir, "started", key+".json")
}

// recordStart records sb's run, which began with its agent taking the socket in its agent
// directory. A record that cannot be written costs later execs the engine's answers only.
func (m *Manager) recordStart(sb *Sandbox) {
	dir := m.agentDirOf(sb)
	if dir == "" {
		return
	}
	id, err := agent.StatSocket(dir)
	if err == nil {
		err = m.State.writeJSON(m.State.startedPath(sb.key()), startRecord{ID: sb.ID, Engine: m.Engine.DaemonHost(), Image: sb.Image, Labels: sb.Labels, Socket: id})
	}
	if err != nil {
		m.debugf("sandbox %q: no start record (%v); its execs will ask the engine", sb.Name, err)
	}
}

// writeJSON writes v to path atomically (temp file + rename), in a private directory.
func (s *StateStore) writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// startRecordOf reads the start record of the sandbox made under key.
func (s *StateStore) startRecordOf(key string) (startRecord, error) {
	var rec startRecord
	f, err := os.Open(s.startedPath(key))
	if err != nil {
		return rec, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxStartRecord+1))
	if err != nil {
		return rec, err
	}
	if len(data) > maxStartRecord {
		return rec, errors.New("larger than a record sbx writes")
	}
	return rec, json.Unmarshal(data, &rec)
}

// notWarm is why a warm exec takes the usual path.
type notWarm struct{ reason string }

func (e *notWarm) Error() string { return e.reason }

func notWarmf(format string, a ...any) error { return &notWarm{reason: fmt.Sprintf(format, a...)} }

// IsNotWarm says err is Warm's "take the usual path", rather than a failure to report.
func IsNotWarm(err error) bool {
	var nw *notWarm
	return errors.As(err, &nw)
}

// Warm returns sandbox in.Name, leased, when it runs as it was started, is current for in
// (as Ensure tells) and its agent greets, without a call to the engine: the connection to
// the agent goes to the next command run in it (Exec). Otherwise it returns an error for
// which IsNotWarm holds, saying why, and the caller takes the usual path (Ensure), or another
// error (the caller's context ended). See the comment at the top of this file.
func (m *Manager) Warm(ctx context.Context, in SpecInput) (*Sandbox, *Lease, error) {
	if m.State == nil || !m.Agents {
		return nil, nil, notWarmf("no agent to ask")
	}
	if m.State.leftThrowaway() {
		return nil, nil, notWarmf("a throwaway sandbox left by an sbx that did not finish waits to be removed")
	}
	sb, rec, err := m.startedSandbox(in)
	if err != nil {
		return nil, nil, err
	}
	lease, err := m.Lease(ctx, in.Name)
	if err != nil {
		return nil, nil, err
	}
	if lease != nil && lease.stopped {
		lease.Release()
		return nil, nil, notWarmf("its agent was stopping it for idleness")
	}
	c, err := agent.DialSocket(ctx, m.agentDirOf(sb), rec.Socket)
	if err == nil {
		if err = c.HelloWithin(warmHello); err != nil {
			c.Close()
		}
	}
	if err != nil {
		lease.Release()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, notWarmf("its agent did not answer (%v): stopped, paused or started again since", err)
	}
	sb.agent = c
	return sb, lease, nil
}

// startedSandbox is sandbox in.Name as its start record describes it, when that record
// holds what Inspect would check (the name, or for a sandbox taken from the pool its claim)
// and what Ensure would (the config hash), and names this engine and this sbx's agent.
func (m *Manager) startedSandbox(in SpecInput) (*Sandbox, startRecord, error) {
	name, key := in.Name, in.Name
	claim, claimed := m.State.claimOf(name)
	if claimed {
		key = claim.Pooled
	}
	rec, err := m.State.startRecordOf(key)
	if errors.Is(err, os.ErrNotExist) {
		return nil, rec, notWarmf("no record of its start")
	}
	if err != nil {
		return nil, rec, notWarmf("its start record: %v", err)
	}
	l := rec.Labels
	switch {
	case rec.Engine != m.Engine.DaemonHost():
		return nil, rec, notWarmf("it was started on another engine (%s)", rec.Engine)
	case l[LabelManaged] != "true" || l[LabelName] != key || (l[LabelPool] != "") != claimed || (claimed && rec.ID != claim.ID):
		return nil, rec, notWarmf("its start record is not of sandbox %q", name)
	case l[LabelAgent] != agent.Version():
		return nil, rec, notWarmf("it runs another agent")
	}
	sb := &Sandbox{Name: name, Key: key, ID: rec.ID, Status: "running", Labels: l, Image: rec.Image}
	sb.CreatedAt, _ = time.Parse(time.RFC3339, l[LabelCreatedAt])
	if claimed {
		sb.CreatedAt = claim.ClaimedAt
	}
	if !m.current(sb, in) {
		return nil, rec, notWarmf("its configuration is not current, or cannot be resolved again")
	}
	return sb, rec, nil
}

// current applies Ensure's rule (Resolver.Drift) to sb as its start record describes it: the
// config hash it carries is in's, or its project resolved again with the flags it was created
// with and the ports it publishes (a sandbox made by sbx create --image, by sbx browser)
// hashes to it. Drift reads the project's files then, never the engine. Without a resolver
// only the hash counts.
func (m *Manager) current(sb *Sandbox, in SpecInput) bool {
	if m.Resolver == nil {
		_, hash, err := in.Shape()
		return err == nil && hash == sb.Hash()
	}
	d, err := m.Resolver.Drift(sb, &in)
	return err == nil && d.Current
}

// takeAgent is the greeted connection to sb's agent that Warm left for its next command, or
// nil.
func (sb *Sandbox) takeAgent() *agent.Client {
	c := sb.agent
	sb.agent = nil
	return c
}

// Release closes the connection to the agent that Warm left when no command took it.
func (sb *Sandbox) Release() {
	if c := sb.takeAgent(); c != nil {
		c.Close()
	}
}
