package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sbx-sandbox/sbx/internal/flock"
	"github.com/sbx-sandbox/sbx/pkg/agent"
	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/engine"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// The pool (the pool key) keeps sandboxes started before anyone asks for them. The engine
// cannot change a container's labels, mounts or hostname once it is made, so a pooled
// sandbox is made under a name of its own, pool-<random>: its dev.sbx.name label, its
// workspace volume, its network and its agent directory all carry that name for life, and
// its dev.sbx.pool label holds the pool key of its configuration (PoolKey). Claiming one
// for sandbox NAME, under the pool lock:
//
//  1. writes claimed/NAME.json in the state directory: the container's ID and its pool
//     name. The state directory is sbx's own, so the record is trusted where a label,
//     which an image can set, is not;
//  2. renames the container sbx-NAME (ContainerRename);
//  3. drops its pool record, and hands NAME the idle lock its agent holds.
//
// From then on Inspect and List accept the container as sandbox NAME only while the record
// names its ID and pool name, and everything sbx keeps per sandbox on the host (agent
// directory, volume, network) is found through Sandbox.Key, the pool name. A pooled sandbox
// is never one a command can name: it becomes a sandbox only by a claim.
//
// Only configurations whose mounts say nothing of a project are pooled (Unpoolable):
// workspace none, no binds, no egress proxy or CA bundle (both kept per sandbox name), no published
// ports, no flag settings.
const (
	// LabelPool holds the pool key of a container made for the pool; it stays once claimed.
	LabelPool = "dev.sbx.pool"
	// PoolPrefix begins the name every pooled sandbox is made under.
	PoolPrefix = "pool-"

	poolDir   = "pool"    // pool/NAME: a pooled container of ours, holding its pool key
	claimDir  = "claimed" // claimed/NAME.json: sandbox NAME is a claimed pooled container
	poolLockF = ".lock"   // pool/.lock: held around every claim and every change of a record
)

// claimRecord says which container sandbox Name is, and under which pool name it was made.
type claimRecord struct {
	ID        string    `json:"id"`
	Pooled    string    `json:"pooled"`
	ClaimedAt time.Time `json:"claimedAt"`
}

// PoolKey is the pool key of in: its config hash, sbx's and the agent's versions and the
// extra labels (a test run's). A pooled sandbox serves only a new sandbox of the same key,
// so it is exactly what a create would have made, but for its name. pool itself is not in
// the config hash, so changing it never changes a sandbox's identity.
func PoolKey(in SpecInput) (string, error) {
	_, hash, err := in.Shape()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s", hash, in.Version, agent.Version())
	for _, k := range slices.Sorted(maps.Keys(in.ExtraLabels)) {
		fmt.Fprintf(h, "\x00%s=%s", k, in.ExtraLabels[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Unpoolable says why a new sandbox of in is never taken from the pool, or "" when it may be.
func Unpoolable(in SpecInput) string {
	switch {
	case in.Config.Workspace != config.WorkspaceNone:
		return fmt.Sprintf("workspace %s mounts the project, which a container cannot change once made; only workspace none is pooled", in.Config.Workspace)
	case len(in.Config.Binds) > 0:
		return "binds mount host paths"
	case len(in.Config.Egress) > 0:
		return "egress gives each sandbox a proxy named after it"
	case in.Config.CACerts != "":
		return "caCerts gives each sandbox a CA directory named after it"
	case len(in.Ports) > 0:
		return "a sandbox that publishes ports is made by its own command"
	case len(in.CreateSettings) > 0:
		return "flags given to create shape only that sandbox"
	}
	return ""
}

// PoolError is a pooled sandbox named where a sandbox was expected: it becomes one only when
// a new sandbox claims it.
type PoolError struct{ Name string }

func (e *PoolError) Error() string {
	return fmt.Sprintf("%q is a pooled sandbox, kept started for the next new sandbox; it is not one you can use by name", e.Name)
}
func (e *PoolError) ExitCode() int { return errs.CodeFailure }
func (e *PoolError) Hint() string {
	return "see the pool with \"sbx pool ls\", empty it with \"sbx pool drain\""
}

// poolLock takes the pool lock, which orders claims and changes of pool records.
func (m *Manager) poolLock(ctx context.Context) (*os.File, error) {
	dir := filepath.Join(m.State.Dir, poolDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	f, err := flock.Open(ctx, filepath.Join(dir, poolLockF), true, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("pool: taking its lock: %w", err)
	}
	return f, nil
}

// poolRecords returns the pool records: pooled sandbox name -> pool key.
func (s *StateStore) poolRecords() (map[string]string, error) {
	names, err := s.entryNames(poolDir, "pool records", isRecord(PoolPrefix))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range names {
		data, err := os.ReadFile(s.poolRecord(name))
		if err != nil {
			continue // claimed or drained since the read
		}
		out[name] = strings.TrimSpace(string(data))
	}
	return out, nil
}

func (s *StateStore) poolRecord(name string) string { return filepath.Join(s.Dir, poolDir, name) }

func (s *StateStore) claimPath(name string) string {
	return filepath.Join(s.Dir, claimDir, name+".json")
}

// claimOf reads the claim record of sandbox name, if any.
func (s *StateStore) claimOf(name string) (claimRecord, bool) {
	var rec claimRecord
	if s == nil || config.ValidName(name) != nil {
		return rec, false
	}
	data, err := os.ReadFile(s.claimPath(name))
	if err != nil || json.Unmarshal(data, &rec) != nil || rec.ID == "" || !strings.HasPrefix(rec.Pooled, PoolPrefix) {
		return claimRecord{}, false
	}
	return rec, true
}

// writeClaim records, atomically, that sandbox name is rec's container.
func (s *StateStore) writeClaim(name string, rec claimRecord) error {
	return s.writeJSON(s.claimPath(name), rec)
}

// validPooled says whether c is a pooled container sbx made: its labels and its own name.
func validPooled(c container.Summary) bool {
	name := c.Labels[LabelName]
	return c.Labels[LabelManaged] == "true" && c.Labels[LabelPool] != "" && strings.HasPrefix(name, PoolPrefix) &&
		config.ValidName(name) == nil && slices.Contains(c.Names, "/"+ContainerName(name))
}

// ListPool returns the pooled sandboxes of key ("" for every key) that this user's sbx made
// (those with a record here), oldest first. Their Name and Key are their pool name.
func (m *Manager) ListPool(ctx context.Context, key string) ([]*Sandbox, error) {
	if m.State == nil {
		return nil, nil
	}
	records, err := m.State.poolRecords()
	if err != nil || len(records) == 0 {
		return nil, err
	}
	label := LabelPool
	if key != "" {
		label += "=" + key
	}
	list, err := m.Engine.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelManaged+"=true"), filters.Arg("label", label))})
	if err != nil {
		return nil, errs.Engine("listing pooled sandboxes", err)
	}
	var out []*Sandbox
	for _, c := range list {
		name := c.Labels[LabelName]
		if !validPooled(c) || records[name] != c.Labels[LabelPool] || (key != "" && c.Labels[LabelPool] != key) {
			continue
		}
		sb := &Sandbox{Name: name, Key: name, ID: c.ID, Status: string(c.State), Labels: c.Labels, Image: engine.NormalizeImage(c.Image)}
		sb.CreatedAt, _ = time.Parse(time.RFC3339, c.Labels[LabelCreatedAt])
		out = append(out, sb)
	}
	slices.SortStableFunc(out, func(a, b *Sandbox) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// FillResult is what FillPool did.
type FillResult struct {
	Key     string   `json:"key"`
	Want    int      `json:"want"`
	Ready   int      `json:"ready"`
	Created []string `json:"created"`
	// Removed are pooled sandboxes of the key that no longer ran (stopped for idleness, or by
	// a restart of the engine): no longer fresh, so not worth claiming.
	Removed []string `json:"removed"`
	// NoRoom says maxRunning left no room for more: the pool never evicts a sandbox.
	NoRoom bool `json:"noRoom"`
}

// FillPool makes and starts pooled sandboxes of in until want of its key run. Fills of one key
// take turns (a lock per key), so a fill started while another runs tops up what it left.
func (m *Manager) FillPool(ctx context.Context, in SpecInput, want int) (*FillResult, error) {
	if m.State == nil {
		return nil, errors.New("pool: sbx has no state directory to keep its records in")
	}
	if why := Unpoolable(in); why != "" {
		return nil, errs.Failure(fmt.Errorf("this configuration is not pooled: %s", why), "set workspace: none (and leave out egress, caCerts and create flags) for a configuration sbx can pool")
	}
	key, err := PoolKey(in)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(m.State.Dir, poolDir), 0o700); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	fill, err := flock.Open(ctx, filepath.Join(m.State.Dir, poolDir, ".fill-"+key), true, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("pool: taking the fill lock: %w", err)
	}
	defer fill.Close()
	res := &FillResult{Key: key, Want: want, Created: []string{}, Removed: []string{}}
	for {
		list, err := m.ListPool(ctx, key)
		if err != nil {
			return res, err
		}
		res.Ready = 0
		for _, p := range list {
			if p.Status == "running" {
				res.Ready++
				continue
			}
			if err := m.removePooled(ctx, p.Name); err != nil {
				return res, err
			}
			res.Removed = append(res.Removed, p.Name)
		}
		if res.Ready >= want {
			return res, nil
		}
		name, started, err := m.addPooled(ctx, in, key)
		if err != nil {
			return res, err
		}
		if !started {
			res.NoRoom = true
			return res, nil
		}
		res.Created = append(res.Created, name)
	}
}

// addPooled makes one pooled sandbox of in and starts it when maxRunning leaves room; when it
// does not, the sandbox is removed and started is false.
func (m *Manager) addPooled(ctx context.Context, in SpecInput, key string) (name string, started bool, err error) {
	var b [5]byte
	_, _ = rand.Read(b[:])
	name = PoolPrefix + hex.EncodeToString(b[:])
	// The record comes first, so a fill killed halfway leaves a record drain can follow.
	if err := os.WriteFile(m.State.poolRecord(name), []byte(key+"\n"), 0o600); err != nil {
		return "", false, fmt.Errorf("pool: recording %s: %w", name, err)
	}
	in.Name, in.PoolKey = name, key
	created, err := m.create(ctx, in)
	if err != nil {
		_ = m.removePooled(context.WithoutCancel(ctx), name)
		return "", false, err
	}
	var startErr error
	room, err := m.admitPooled(ctx, in.Config, func(ctx context.Context) error {
		startErr = m.start(ctx, created)
		return startErr
	})
	if err != nil || !room {
		_ = m.removePooled(context.WithoutCancel(ctx), name)
		return "", false, err
	}
	if _, err := os.Stat(m.State.poolRecord(name)); err != nil {
		// Drained while it started: it goes too.
		_ = m.removePooled(context.WithoutCancel(ctx), name)
		return "", false, errs.Failure(fmt.Errorf("pool: %s was drained while it started", name), "")
	}
	return name, true, nil
}

// admitPooled runs start under maxRunning's admission lock when one more sandbox may run
// beside those running (pooled ones included), and reports whether it did: unlike admit, it
// never evicts a sandbox for the pool.
func (m *Manager) admitPooled(ctx context.Context, cfg config.Config, start func(context.Context) error) (bool, error) {
	if cfg.MaxRunning <= 0 {
		return true, start(ctx)
	}
	lock, err := flock.Open(ctx, filepath.Join(m.State.Dir, admissionLockFile), true, true)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, errs.Failure(fmt.Errorf("maxRunning: taking the admission lock: %w", err), "")
	}
	defer lock.Close()
	running, pooled, err := m.runningOurs(ctx, "")
	if err != nil {
		return false, err
	}
	if len(running)+len(pooled)+1 > cfg.MaxRunning {
		return false, nil
	}
	return true, start(ctx)
}

// runningOurs lists the running sandboxes this user's sbx has used (a state file here), but
// except, and the running pooled sandboxes it made: what maxRunning counts.
func (m *Manager) runningOurs(ctx context.Context, except string) (running, pooled []*Sandbox, err error) {
	list, err := m.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, sb := range list {
		if _, ours := m.State.LastUsed(sb.Name); ours && sb.Status == "running" && sb.Name != except {
			running = append(running, sb)
		}
	}
	all, err := m.ListPool(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	for _, p := range all {
		if p.Status == "running" {
			pooled = append(pooled, p)
		}
	}
	return running, pooled, nil
}

// errNameTaken says a claim found the sandbox's name taken since Ensure looked for it.
var errNameTaken = errors.New("the sandbox exists now")

// claimPooled makes a running pooled sandbox of in's key sandbox in.Name (see the top of this
// file), or returns nil when there is none to take, and errNameTaken when another sbx made
// sandbox in.Name since Ensure found none.
func (m *Manager) claimPooled(ctx context.Context, in SpecInput) (*Sandbox, error) {
	key, err := PoolKey(in)
	if err != nil {
		return nil, err
	}
	lock, err := m.poolLock(ctx)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	// Another sbx may have claimed one for the same name while this one waited for the lock:
	// its record must not be overwritten, and the sandbox is Ensure's to find.
	if _, err := m.Engine.ContainerInspect(ctx, ContainerName(in.Name)); err == nil {
		return nil, errNameTaken
	} else if !cerrdefs.IsNotFound(err) {
		return nil, errs.Engine(fmt.Sprintf("inspecting sandbox %q", in.Name), err)
	}
	list, err := m.ListPool(ctx, key)
	if err != nil {
		return nil, err
	}
	_, hash, _ := in.Shape()
	for _, p := range list {
		if p.Status != "running" || p.Hash() != hash {
			continue
		}
		rec := claimRecord{ID: p.ID, Pooled: p.Name, ClaimedAt: m.Now().UTC()}
		if err := m.State.writeClaim(in.Name, rec); err != nil {
			return nil, fmt.Errorf("pool: recording the claim of %s: %w", p.Name, err)
		}
		err := m.Engine.ContainerRename(ctx, p.ID, ContainerName(in.Name))
		switch {
		case cerrdefs.IsConflict(err):
			// Another sbx created sandbox in.Name meanwhile: Ensure finds it.
			_ = os.Remove(m.State.claimPath(in.Name))
			return nil, errNameTaken
		case cerrdefs.IsNotFound(err):
			_ = os.Remove(m.State.claimPath(in.Name))
			continue
		case err != nil:
			_ = os.Remove(m.State.claimPath(in.Name))
			return nil, errs.Engine(fmt.Sprintf("claiming pooled sandbox %s as %q", p.Name, in.Name), err)
		}
		_ = os.Remove(m.State.poolRecord(p.Name))
		m.moveIdleLock(p.Name, in.Name)
		_ = m.State.Touch(in.Name)
		m.announce("sandbox %q taken from the pool (%s)\n", in.Name, p.Name)
		return &Sandbox{Name: in.Name, Key: p.Name, ID: p.ID, Status: "running", Labels: p.Labels, Image: p.Image, CreatedAt: rec.ClaimedAt}, nil
	}
	return nil, nil
}

// moveIdleLock gives sandbox to the idle lock pooled sandbox from's agent holds: leases of
// to then take the very file the agent watches (idle.go).
func (m *Manager) moveIdleLock(from, to string) {
	src, dst := m.State.IdleLockPath(from), m.State.IdleLockPath(to)
	tmp := dst + ".claim"
	_ = os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		m.debugf("sandbox %q: no idle lock from the pool (%v)", to, err)
		return
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		m.debugf("sandbox %q: no idle lock from the pool (%v)", to, err)
		return
	}
	_ = os.Remove(src)
}

// removePooled removes pooled sandbox name with everything made for it, and its record. Under
// the pool lock it first takes the record away, so no claim can take the sandbox meanwhile;
// one claimed already is left alone.
func (m *Manager) removePooled(ctx context.Context, name string) error {
	lock, err := m.poolLock(ctx)
	if err != nil {
		return err
	}
	_, recErr := os.Stat(m.State.poolRecord(name))
	if recErr == nil {
		recErr = os.Remove(m.State.poolRecord(name))
	}
	lock.Close()
	if recErr != nil {
		return nil // claimed, or removed by another sbx
	}
	info, err := m.Engine.ContainerInspect(ctx, ContainerName(name))
	switch {
	case cerrdefs.IsNotFound(err):
		return m.removeLeftovers(ctx, name)
	case err != nil:
		return errs.Engine(fmt.Sprintf("inspecting pooled sandbox %s", name), err)
	case info.Config == nil || info.Config.Labels[LabelManaged] != "true" || info.Config.Labels[LabelName] != name || info.Config.Labels[LabelPool] == "":
		return &NotManagedError{Container: ContainerName(name)}
	}
	sb := &Sandbox{Name: name, Key: name, ID: info.ID, Labels: info.Config.Labels, Image: engine.NormalizeImage(info.Config.Image)}
	return m.removeContainer(ctx, sb, true)
}

// DrainPool removes the pooled sandboxes of key ("" for every key) that this user's sbx made,
// with what fills killed halfway left, and returns their names. It waits for a fill of the
// key under way, so nothing it starts survives the drain.
func (m *Manager) DrainPool(ctx context.Context, key string) ([]string, error) {
	if m.State == nil {
		return nil, nil
	}
	records, err := m.State.poolRecords()
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for _, k := range records {
		if key == "" || k == key {
			keys[k] = true
		}
	}
	removed := []string{}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if strings.ContainsAny(k, "/\x00") || k == "" {
			continue
		}
		fill, err := flock.Open(ctx, filepath.Join(m.State.Dir, poolDir, ".fill-"+k), true, true)
		if err != nil {
			return removed, fmt.Errorf("pool: waiting for a fill: %w", err)
		}
		records, err := m.State.poolRecords()
		if err == nil {
			for _, name := range slices.Sorted(maps.Keys(records)) {
				if records[name] != k {
					continue
				}
				if err = m.removePooled(ctx, name); err != nil {
					break
				}
				removed = append(removed, name)
			}
		}
		fill.Close()
		if err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// claimedAs is the sandbox name a container made for the pool was claimed as, by its claim
// record, and when; ok is false for one not claimed (or not by this user's sbx).
func (m *Manager) claimedAs(c container.Summary) (name string, at time.Time, ok bool) {
	for _, n := range c.Names {
		name, found := strings.CutPrefix(n, "/"+ContainerName(""))
		if !found {
			continue
		}
		if rec, ok := m.State.claimOf(name); ok && rec.ID == c.ID && rec.Pooled == c.Labels[LabelName] {
			return name, rec.ClaimedAt, true
		}
	}
	return "", time.Time{}, false
}
