package sandbox_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/engine/enginetest"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

// fakeAgent listens on the agent socket of a sandbox's directory and, unless mute, greets
// every client and answers its one command with "hi" on stdout and exit status 3.
type fakeAgent struct {
	ln       *net.UnixListener
	accepted atomic.Int32
}

func startFakeAgent(t *testing.T, dir string, mute bool) *fakeAgent {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "agent.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false) // a stopped sandbox's socket stays, refusing
	a := &fakeAgent{ln: ln}
	t.Cleanup(func() { ln.Close() })
	if mute {
		return a // connections wait in the backlog, as for a paused sandbox
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.accepted.Add(1)
			go serveOne(c)
		}
	}()
	return a
}

func frame(typ agent.FrameType, body string) []byte {
	b := []byte{byte(typ), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(body)))
	return append(b, body...)
}

func serveOne(c net.Conn) {
	defer c.Close()
	if _, err := c.Write(frame(agent.FrameHello, agent.Version())); err != nil {
		return
	}
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(hdr[1:]))); err != nil {
			return
		}
		if agent.FrameType(hdr[0]) == agent.FrameStdinEOF {
			_, _ = c.Write(append(frame(agent.FrameStdout, "hi"), frame(agent.FrameExit, "3")...))
			return
		}
	}
}

// otherHost is the fake engine under another address: another engine on this machine.
type otherHost struct{ *enginetest.FakeEngine }

func (otherHost) DaemonHost() string { return "unix:///other/docker.sock" }

// warmSetup is a manager on a fake engine that stubs nothing, so any engine call fails the
// test, and sandbox in running with its agent (unless mute), its start recorded.
func warmSetup(t *testing.T, in sandbox.SpecInput, mute bool) (*sandbox.Manager, *sandbox.Sandbox, *fakeAgent) {
	t.Helper()
	m := fakeManager(t, &enginetest.FakeEngine{})
	m.Agents = true
	sb := &sandbox.Sandbox{Name: in.Name, Key: in.Name, ID: "c1", Status: "running", Labels: inspectOf(t, in, "running").Config.Labels, Image: in.Config.Image}
	sb.Labels[sandbox.LabelAgent] = agent.Version()
	a := startFakeAgent(t, m.State.DirIn(sandbox.AreaAgent, sb.Key), mute)
	m.RecordStart(sb)
	return m, sb, a
}

// A warm exec runs the command through the agent that greeted it, on the connection Warm
// made, with no engine call at all: the fake engine fails the test on any.
func TestWarmExecMakesNoEngineCall(t *testing.T) {
	in := specInput()
	m, _, a := warmSetup(t, in, false)
	sb, lease, err := m.Warm(context.Background(), in)
	if err != nil {
		t.Fatalf("warm: %v", err)
	}
	defer lease.Release()
	defer sb.Release()
	if sb.Name != in.Name || sb.ID != "c1" || sb.Status != "running" || sb.Hash() == "" {
		t.Errorf("warm sandbox %+v", sb)
	}
	var out bytes.Buffer
	res, err := m.Exec(context.Background(), sb, sandbox.ExecOptions{Cmd: []string{"true"}, Stdout: &out, Stderr: io.Discard})
	if err != nil || res.ExitCode != 3 || out.String() != "hi" {
		t.Fatalf("exec: %+v %v, stdout %q", res, err, out.String())
	}
	if n := a.accepted.Load(); n != 1 {
		t.Errorf("the agent took %d connections, want 1: Exec must use the one Warm greeted", n)
	}
}

// Every case the record cannot vouch for takes the usual path, without an engine call and
// holding nothing: the caller's Ensure then asks the engine.
func TestWarmFallsBack(t *testing.T) {
	sandbox.SetWarmHello(t, 50*time.Millisecond)
	for _, tt := range []struct {
		name, why string
		mute      bool
		change    func(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, a *fakeAgent, in *sandbox.SpecInput) *sandbox.Manager
	}{
		{name: "no record", why: "no record of its start",
			change: func(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, a *fakeAgent, in *sandbox.SpecInput) *sandbox.Manager {
				in.Name = "other-123456"
				return m
			}},
		{name: "a changed config", why: "not current",
			change: func(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, a *fakeAgent, in *sandbox.SpecInput) *sandbox.Manager {
				in.Config.Memory *= 2
				return m
			}},
		{name: "another engine", why: "started on another engine",
			change: func(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, a *fakeAgent, in *sandbox.SpecInput) *sandbox.Manager {
				m.Engine = otherHost{m.Engine.(*enginetest.FakeEngine)}
				return m
			}},
		{name: "another agent", why: "runs another agent",
			change: func(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, a *fakeAgent, in *sandbox.SpecInput) *sandbox.Manager {
				sb.Labels[sandbox.LabelAgent] = "0123456789ab"
				m.RecordStart(sb)
				return m
			}},
		{name: "started again", why: "not the socket sbx recorded",
			change: func(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, a *fakeAgent, in *sandbox.SpecInput) *sandbox.Manager {
				a.ln.Close()
				if err := os.Remove(filepath.Join(m.State.DirIn(sandbox.AreaAgent, sb.Key), "agent.sock")); err != nil {
					t.Fatal(err)
				}
				startFakeAgent(t, m.State.DirIn(sandbox.AreaAgent, sb.Key), false)
				return m
			}},
		{name: "stopped", why: "connection refused",
			change: func(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, a *fakeAgent, in *sandbox.SpecInput) *sandbox.Manager {
				a.ln.Close()
				return m
			}},
		{name: "paused", why: "i/o timeout", mute: true,
			change: func(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, a *fakeAgent, in *sandbox.SpecInput) *sandbox.Manager {
				return m
			}},
		{name: "a throwaway sandbox left behind", why: "throwaway sandbox left",
			change: func(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, a *fakeAgent, in *sandbox.SpecInput) *sandbox.Manager {
				writeFile(t, filepath.Join(m.State.Dir, "throwaway", "tmp-0123456789"), "")
				return m
			}},
		{name: "an unclaimed pooled sandbox's name", why: "not of sandbox",
			change: func(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, a *fakeAgent, in *sandbox.SpecInput) *sandbox.Manager {
				sb.Labels[sandbox.LabelPool] = "key"
				m.RecordStart(sb)
				return m
			}},
		{name: "a claim of another container", why: "not of sandbox",
			change: func(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, a *fakeAgent, in *sandbox.SpecInput) *sandbox.Manager {
				claimed(t, m, sb, in, "c2")
				return m
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := specInput()
			m, sb, a := warmSetup(t, in, tt.mute)
			m = tt.change(t, m, sb, a, &in)
			got, lease, err := m.Warm(context.Background(), in)
			if !sandbox.IsNotWarm(err) || !strings.Contains(err.Error(), tt.why) || got != nil || lease != nil {
				t.Fatalf("want the usual path because %q, got %v %v %v", tt.why, got, lease, err)
			}
			// Nothing held: an eviction could take the lease at once.
			if l, err := m.Lease(context.Background(), in.Name); err != nil || l == nil {
				t.Errorf("lease after a fallback: %v %v", l, err)
			} else {
				l.Release()
			}
		})
	}
}

// claimed makes sb a sandbox taken from the pool as name in.Name, its claim naming
// container id: its start record is its pool name's, and its agent's directory too.
func claimed(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, in *sandbox.SpecInput, id string) {
	t.Helper()
	pooled := sandbox.PoolPrefix + "0123456789"
	pin := *in
	pin.Name = pooled
	psb := &sandbox.Sandbox{Name: pooled, Key: pooled, ID: "c1", Status: "running", Labels: inspectOf(t, pin, "running").Config.Labels, Image: sb.Image}
	psb.Labels[sandbox.LabelAgent] = agent.Version()
	psb.Labels[sandbox.LabelPool] = "key"
	startFakeAgent(t, m.State.DirIn(sandbox.AreaAgent, pooled), false)
	m.RecordStart(psb)
	if err := m.State.WriteClaim(in.Name, id, pooled); err != nil {
		t.Fatal(err)
	}
}

// A sandbox taken from the pool is warm under its claimed name, through its pool name's
// record and agent.
func TestWarmClaimedSandbox(t *testing.T) {
	in := specInput()
	m := fakeManager(t, &enginetest.FakeEngine{})
	m.Agents = true
	claimed(t, m, &sandbox.Sandbox{Image: in.Config.Image}, &in, "c1")
	sb, lease, err := m.Warm(context.Background(), in)
	if err != nil {
		t.Fatalf("warm: %v", err)
	}
	defer lease.Release()
	defer sb.Release()
	if sb.Name != in.Name || !strings.HasPrefix(sb.WorkspaceVolume(), "sbx-"+sandbox.PoolPrefix) {
		t.Errorf("claimed sandbox %q, volume %q", sb.Name, sb.WorkspaceVolume())
	}
}

// The record of a throwaway sandbox whose sbx still runs (it holds the record's lock) does
// not stop a warm exec.
func TestWarmWithAThrowawayInFlight(t *testing.T) {
	in := specInput()
	m, _, _ := warmSetup(t, in, false)
	path := filepath.Join(m.State.Dir, "throwaway", "tmp-0123456789")
	writeFile(t, path, "")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	sb, lease, err := m.Warm(context.Background(), in)
	if err != nil {
		t.Fatalf("warm: %v", err)
	}
	sb.Release()
	lease.Release()
}

// rm forgets the start record with the sandbox.
func TestRemoveForgetsTheStartRecord(t *testing.T) {
	in := specInput()
	m, _, _ := warmSetup(t, in, false)
	record := filepath.Join(m.State.Dir, "started", in.Name+".json")
	if _, err := os.Stat(record); err != nil {
		t.Fatal(err)
	}
	fake := m.Engine.(*enginetest.FakeEngine)
	fake.ContainerInspectFn = func(context.Context, string) (container.InspectResponse, error) {
		info := inspectOf(t, in, "running")
		info.Config.Labels[sandbox.LabelAgent] = agent.Version()
		return info, nil
	}
	fake.ContainerRemoveFn = func(context.Context, string, container.RemoveOptions) error { return nil }
	if err := m.Remove(context.Background(), in.Name, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Errorf("the start record is left: %v", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
