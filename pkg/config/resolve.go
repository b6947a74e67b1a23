package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sbx-sandbox/sbx/images"
	"github.com/sbx-sandbox/sbx/pkg/cacerts"
	"github.com/sbx-sandbox/sbx/pkg/egress"
	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// Setting is one value set outside the files: by a command-line flag.
type Setting struct {
	Key    string   // a config key: "memory", "env", "binds"
	Values []string // scalar keys use the last; list and map keys take every value
	Source Source
}

// Inputs are everything Resolve reads from the outside world. Nothing here dials Docker.
type Inputs struct {
	Getenv     func(string) string
	HomeDir    func() (string, error)
	WorkingDir func() (string, error)
	ProjectDir string    // --project
	ConfigFile string    // --config
	Name       string    // sandbox name; "" is the project's default sandbox
	Flags      []Setting // the flag layer: only flags the user set
	HostCPUs   int       // 0 skips the cpus upper bound

	// HostMemory is this machine's memory in bytes; 0 leaves limits.memory's default uncapped.
	HostMemory int64
	// Trust holds the project files the user trusted; nil trusts none.
	Trust *TrustStore
	// HostCADirs are where caCerts: host looks; nil means cacerts.HostDirs.
	HostCADirs []string

	// GitTopLevel finds the git top-level of a directory; nil walks up for .git.
	GitTopLevel func(dir string) (string, bool)
	// FileOwner returns the uid and gid owning a path; nil stats it.
	FileOwner func(path string) (uid, gid int, err error)
	// Ownership and UID check who controls a config file discovery finds; nil uses the real ones.
	Ownership func(path string) (Ownership, error)
	UID       func() int
}

// File is a config file Resolve considered.
type File struct {
	Layer string `json:"layer"`
	Path  string `json:"path"`
	Found bool   `json:"found"`
}

// Resolved is the configuration of one sandbox with the provenance of every value.
type Resolved struct {
	Config Config
	// Sources maps key paths to where their value came from: "memory", "prune.idleHours",
	// "env.LANG", "tmpfs[0]", "binds[1]", "tools.deny[0]", "ulimits.nofile".
	Sources map[string]Source

	Name            string
	IsDefaultName   bool
	ProjectRoot     string // absolute, symlink-free
	ProjectRootFrom string // RootFromFlag, RootFromFile, RootFromGit or RootFromWorkDir
	WorkingDir      string
	Files           []File
	HostCPUs        int

	// Trust says whether the project file may loosen the sandbox.
	Trust Trust
	// Loosenings are what the project file gives the sandbox beyond the user's own layers;
	// each is refused (and among Problems) unless the file is trusted.
	Loosenings []Loosening
	// Skipped are the config files discovery passed over because another user controls them.
	Skipped []Skipped

	// Problems are refusals; any one makes Resolve return a *ValidationError.
	Problems []Problem
	// Warnings are worth knowing but refuse nothing.
	Warnings []Problem

	home         string
	dockerSocket string
	bindSpecs    []string // binds as written, parallel to Config.Binds
	nameSpecific bool     // a config file has a sandboxes: section
	sections     []string // the sandbox sections of the project file
	caPEM        []byte   // the certificates caCerts names, as read for validation
	caErr        error    // why they could not be read
}

// CACertsPEM returns the certificates caCerts names, as PEM, read once while resolving: the
// sandbox gets exactly what validation checked.
func (r *Resolved) CACertsPEM() []byte { return r.caPEM }

// EgressRules are the rules egress allows, presets expanded in the order the proxy decides
// by; nil when the list is empty or does not expand (validation says why).
func (r *Resolved) EgressRules() []egress.Rule {
	rules, _ := egress.Expand(r.Config.Egress)
	return rules
}

// ProjectSections lists the names of the project file's sandboxes: sections, whose settings
// apply only to the sandbox of that name.
func (r *Resolved) ProjectSections() []string { return r.sections }

// DependsOnName reports whether a config file has sandbox sections, so that another name
// could resolve differently. Without them, sandboxes of one project created with the same
// flags resolve alike.
func (r *Resolved) DependsOnName() bool { return r.nameSpecific }

// ContainerName is the Docker container of the sandbox.
func (r *Resolved) ContainerName() string { return "sbx-" + r.Name }

// Err returns a *ValidationError when any setting was refused, else nil.
func (r *Resolved) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: r.Problems}
}

// Source returns where key's value came from.
func (r *Resolved) Source(key string) Source { return r.Sources[key] }

// ExecsOnHost reports whether this sandbox's execs run directly on the host, which mode
// decides: off runs every exec there, non-main the default (unnamed) sandbox's.
func (r *Resolved) ExecsOnHost() bool {
	switch r.Config.Mode {
	case ModeOff:
		return true
	case ModeNonMain:
		return r.IsDefaultName
	}
	return false
}

// Resolve layers the built-in defaults, the profile, the user file, the project file, the
// --config file, SBX_* variables and the flags, then validates the result. When a setting is
// refused it returns the Resolved (so explain can show it) together with a *ValidationError;
// any other error leaves the Resolved nil.
func Resolve(in Inputs) (*Resolved, error) {
	getenv := in.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if in.WorkingDir == nil {
		in.WorkingDir = os.Getwd
	}
	wd, err := in.WorkingDir()
	if err != nil {
		return nil, errs.Failure(fmt.Errorf("finding the working directory: %w", err), "cd into an existing directory")
	}
	root, from, skipped, err := FindProjectRoot(wd, in.ProjectDir, Discovery{GitTopLevel: in.GitTopLevel, Ownership: in.Ownership, UID: in.UID})
	if err != nil {
		return nil, errs.Usagef("finding the project root: %w", err).WithHint("pass --project with an existing directory")
	}
	r := &Resolved{Name: in.Name, ProjectRoot: root, ProjectRootFrom: from, WorkingDir: wd, HostCPUs: in.HostCPUs,
		Skipped: skipped, Trust: Trust{State: TrustNone}}
	if r.Name == "" {
		r.Name, r.IsDefaultName = DefaultName(root), true
	} else if err := ValidName(r.Name); err != nil {
		return nil, errs.Usagef("%w", err).WithHint("sandbox names look like web or api-2")
	}
	if in.HomeDir != nil {
		r.home, _ = in.HomeDir()
	}
	if r.home == "" {
		r.home = getenv("HOME")
	}
	if r.home != "" {
		r.home = canonical(r.home)
	}
	if sock, ok := strings.CutPrefix(getenv("DOCKER_HOST"), "unix://"); ok {
		r.dockerSocket = sock
	}

	var layers [][]entry
	var problems []Problem
	projectLayer := -1
	var projectPath string
	var projectData []byte
	load := func(layer, path string, required bool) {
		data, err := readConfigFile(path)
		r.Files = append(r.Files, File{Layer: layer, Path: path, Found: err == nil})
		src := Source{Layer: layer, File: path}
		switch {
		case errors.Is(err, fs.ErrNotExist) && !required:
			return
		case errors.Is(err, fs.ErrNotExist):
			problems = append(problems, Problem{Source: src, Reason: "config file not found", Fix: "check the path given to --config"})
			return
		case err != nil:
			problems = append(problems, Problem{Source: src, Reason: "cannot read the config file: " + unwrapPathError(err), Fix: "make it a readable file of at most " + FormatSize(maxConfigFile)})
			return
		}
		res := parseFile(src, data, r.Name)
		r.nameSpecific = r.nameSpecific || res.sections
		if layer == LayerProject {
			projectPath, projectData = path, data
			r.sections = res.sectionNames
			projectLayer = len(layers)
		}
		layers = append(layers, res.entries)
		problems = append(problems, res.problems...)
	}
	if p := UserConfigPath(getenv, r.home); p != "" {
		load(LayerUser, p, false)
	}
	// A file discovery passed over stays unread even when its directory became the root.
	if p := filepath.Join(root, ProjectFileName); !slices.ContainsFunc(skipped, func(s Skipped) bool { return s.Path == p }) {
		load(LayerProject, p, false)
	}
	if in.ConfigFile != "" {
		p := in.ConfigFile
		if !filepath.IsAbs(p) {
			p = filepath.Join(wd, p)
		}
		load(LayerConfig, p, true)
	}
	envEntries, envProblems := environmentLayer(getenv)
	flagEntries, flagProblems := flagLayer(in.Flags)
	layers = append(layers, envEntries, flagEntries)
	problems = append(append(problems, envProblems...), flagProblems...)

	r.build(layers, in.FileOwner, in.HostMemory)
	// Read before trust is judged: trust covers the certificates as read here.
	r.caPEM, r.caErr = cacerts.Read(r.Config.CACerts, cacerts.Options{Guard: r.ProjectRoot, HostDirs: in.HostCADirs})
	if projectLayer >= 0 {
		r.Trust = trustOf(in.Trust, projectPath, projectData, r.projectFiles())
		base := &Resolved{Name: r.Name, ProjectRoot: r.ProjectRoot, WorkingDir: r.WorkingDir, HostCPUs: r.HostCPUs, home: r.home}
		base.build(slices.Delete(slices.Clone(layers), projectLayer, projectLayer+1), in.FileOwner, in.HostMemory)
		r.Loosenings = loosenings(base, r)
		if !r.Trust.Trusted() {
			problems = append(problems, r.Trust.refusals(r.Loosenings)...)
		}
	}

	refused, warnings := Validate(r)
	r.Problems = append(problems, refused...)
	r.Warnings = append(r.Warnings, warnings...)
	for i := range r.Problems {
		r.Problems[i].Severity = SeverityError
	}
	return r, r.Err()
}

// maxConfigFile bounds a config file: a project's is written by whoever wrote the repository.
const maxConfigFile = 1 << 20

func readConfigFile(path string) ([]byte, error) { return ReadFileLimit(path, maxConfigFile) }

// ReadFileLimit reads the regular file at path, refusing one larger than limit bytes: what
// sbx reads may come from a project or a sandbox, and must never fill its memory.
func ReadFileLimit(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("not a regular file")}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("larger than %s", FormatSize(limit))}
	}
	return data, nil
}

// build layers the profile and layers over the built-in defaults and derives what depends on
// other values.
func (r *Resolved) build(layers [][]entry, owner func(string) (int, int, error), hostMemory int64) {
	st := newState()
	profile := st.c.Profile
	for _, l := range layers {
		for _, e := range l {
			if e.key.name == "profile" {
				profile = e.val.(string)
			}
		}
	}
	if pe, ok := profileEntries(profile); ok {
		st.applyAll(pe)
	}
	for _, l := range layers {
		st.applyAll(l)
	}
	r.Config, r.Sources, r.bindSpecs = st.c, st.src, st.bindSpecs
	r.derive(owner, hostMemory)
	r.normalise()
}

// loosenings judges every key of full against base, the same configuration without the
// project file.
func loosenings(base, full *Resolved) []Loosening {
	j := &judge{base: base, full: full, file: full.Trust.File,
		fromFile: func(s Source) bool { return s.Layer == LayerProject }}
	if src := full.Sources["profile"]; src.Layer == LayerProject {
		j.profile = &src
	}
	for _, k := range registry {
		looseningRules[k.name](j)
	}
	return j.out
}

func environmentLayer(getenv func(string) string) ([]entry, []Problem) {
	var entries []entry
	var problems []Problem
	for _, k := range registry {
		if k.env == "" {
			continue
		}
		v := getenv(k.env)
		if v == "" {
			continue
		}
		src := Source{Layer: LayerEnv, Name: k.env}
		val, err := parseScalarText(k, v)
		if err != nil {
			problems = append(problems, Problem{Key: k.name, Source: src, Value: v, Reason: err.Error(), Fix: "set " + k.env + " to a valid value or unset it"})
			continue
		}
		entries = append(entries, entry{key: k, src: src, val: val})
	}
	return entries, problems
}

func flagLayer(settings []Setting) ([]entry, []Problem) {
	var entries []entry
	var problems []Problem
	for _, s := range settings {
		k := lookupKey(s.Key)
		if k == nil {
			problems = append(problems, Problem{Key: s.Key, Source: s.Source, Reason: "unknown key", Fix: "this is a bug in sbx's flags"})
			continue
		}
		e := entry{key: k, src: s.Source}
		var err error
		var bad string
		if isList(k.kind) {
			for _, v := range s.Values {
				var val any
				if val, err = parseItemText(k, v); err != nil {
					bad = v
					break
				}
				e.items = append(e.items, item{val: val, src: s.Source})
			}
		} else if len(s.Values) > 0 {
			bad = s.Values[len(s.Values)-1]
			e.val, err = parseScalarText(k, bad)
		} else {
			continue
		}
		if err != nil {
			problems = append(problems, Problem{Key: k.name, Source: s.Source, Value: bad, Reason: err.Error(), Fix: "pass a valid value: " + strings.TrimPrefix(fixFor(k), "write it as ")})
			continue
		}
		entries = append(entries, e)
	}
	return entries, problems
}

// derive fills the defaults that depend on other values: the profile's image, swap equal to
// memory, and in rw and overlay mode the project root's owner as the user (never root implicitly).
func (r *Resolved) derive(owner func(string) (int, int, error), hostMemory int64) {
	c := &r.Config
	// The ceilings' defaults never exceed the machine.
	if r.Sources["limits.memory"].IsDefault() && hostMemory > 0 && c.Limits.Memory > hostMemory {
		c.Limits.Memory = hostMemory
		r.Sources["limits.memory"] = Source{Layer: LayerDefault, Note: "this machine's memory"}
	}
	if r.Sources["limits.cpus"].IsDefault() && r.HostCPUs > 0 && c.Limits.CPUs > float64(r.HostCPUs) {
		c.Limits.CPUs = float64(r.HostCPUs)
		r.Sources["limits.cpus"] = Source{Layer: LayerDefault, Note: "this machine's CPUs"}
	}
	if r.Sources["memorySwap"].IsDefault() {
		c.MemorySwap = c.Memory
		r.Sources["memorySwap"] = Source{Layer: LayerDefault, Note: "same as memory"}
	}
	// An overlay's upper layer lives on the host: owned by the project's owner, the user who
	// owns the project can read, apply and remove what the sandbox wrote there.
	if r.Sources["user"].IsDefault() && (c.Workspace == WorkspaceRW || c.Workspace == WorkspaceOverlay) {
		if owner == nil {
			owner = fileOwner
		}
		uid, gid, err := owner(r.ProjectRoot)
		switch {
		case err != nil:
		case uid == 0:
			r.Warnings = append(r.Warnings, Problem{Severity: SeverityWarning, Key: "user", Source: r.Sources["user"], Value: c.User,
				Reason: "the project root is owned by root, which sbx never picks as the sandbox's user: the sandbox runs as " + c.User + ", which cannot write where only root can (and owns what it writes)",
				Fix:    "chown the project to your user, or pass --user 0:0 (root without capabilities) if the sandbox should write as root"})
		default:
			c.User = fmt.Sprintf("%d:%d", uid, gid)
			r.Sources["user"] = Source{Layer: LayerDefault, Note: "owner of the project root"}
		}
	}
	// The profiles' home tmpfs belongs to the sandbox user, whoever that turned out to be.
	if uid, gid, ok := strings.Cut(c.User, ":"); ok && isNumeric(uid) && isNumeric(gid) {
		for i, t := range c.Tmpfs {
			if t.Path != profileHome || r.Sources[fmt.Sprintf("tmpfs[%d]", i)].Layer != LayerProfile {
				continue
			}
			for j, o := range t.Options {
				switch {
				case strings.HasPrefix(o, "uid="):
					t.Options[j] = "uid=" + uid
				case strings.HasPrefix(o, "gid="):
					t.Options[j] = "gid=" + gid
				}
			}
		}
	}
	switch p := c.CACerts; {
	case strings.EqualFold(p, "none"):
		c.CACerts = ""
	case strings.EqualFold(p, cacerts.Host):
		c.CACerts = cacerts.Host
	case p == "":
	case filepath.IsAbs(p):
		c.CACerts = filepath.Clean(p)
	default:
		// As a path in a file is read: from the file's directory; from SBX_CA_CERTS, from the
		// working directory.
		base := r.WorkingDir
		if f := r.Sources["caCerts"].File; f != "" {
			base = filepath.Dir(f)
		}
		c.CACerts = filepath.Join(base, p)
	}
	for i := range c.Binds {
		if filepath.IsAbs(c.Binds[i].Source) {
			c.Binds[i].Source = canonical(c.Binds[i].Source)
		}
	}
	// A seccomp profile kept in the project decides what the sandbox may do next time: a rw
	// sandbox must not be able to rewrite it.
	if c.Workspace == WorkspaceRW && filepath.IsAbs(c.SeccompProfile) {
		if rel, err := filepath.Rel(r.ProjectRoot, canonical(c.SeccompProfile)); err == nil && filepath.IsLocal(rel) && !slices.Contains(c.ProtectedPaths, rel) {
			c.ProtectedPaths = append(c.ProtectedPaths, filepath.ToSlash(rel))
			r.Sources[fmt.Sprintf("protectedPaths[%d]", len(c.ProtectedPaths)-1)] = Source{Layer: LayerDefault, Note: "the seccomp profile"}
		}
	}
}

// normalise rewrites accepted spellings into the one form consumers see.
func (r *Resolved) normalise() {
	c := &r.Config
	switch {
	case c.User == "root":
		c.User = "0:0"
	case isNumeric(c.User):
		c.User += ":" + c.User
	}
	for _, caps := range []*[]string{&c.CapAdd, &c.CapDrop} {
		for i, name := range *caps {
			(*caps)[i] = strings.TrimPrefix(strings.ToUpper(name), "CAP_")
		}
	}
	// "default" names the default in any case; other values keep their case for validation.
	if strings.EqualFold(c.SeccompProfile, "default") {
		c.SeccompProfile = ""
	}
	if strings.EqualFold(c.ApparmorProfile, "default") {
		c.ApparmorProfile = ""
	}
}

// state is the configuration being built, layer by layer.
type state struct {
	c         Config
	src       map[string]Source
	bindSpecs []string
}

func newState() *state {
	c := builtinDefaults()
	lists := []string{"capDrop", "tools.allow", "tools.deny", "protectedPaths", "workspaceExclude"}
	n := len(registry) + len(c.Tmpfs) + len(c.Env) + len(c.Ulimits)
	for _, k := range lists {
		n += len(*lookupKey(k).field(&c).(*[]string))
	}
	// Sized once: growing it was a tenth of a warm exec's resolve.
	st := &state{c: c, src: make(map[string]Source, n)}
	def := Source{Layer: LayerDefault}
	for _, k := range registry {
		st.src[k.name] = def
	}
	for i := range st.c.Tmpfs {
		st.src[fmt.Sprintf("tmpfs[%d]", i)] = def
	}
	for name := range st.c.Env {
		st.src["env."+name] = def
	}
	for name := range st.c.Ulimits {
		st.src["ulimits."+name] = def
	}
	for _, k := range lists {
		for i := range *lookupKey(k).field(&st.c).(*[]string) {
			st.src[fmt.Sprintf("%s[%d]", k, i)] = def
		}
	}
	return st
}

func (st *state) applyAll(entries []entry) {
	for _, e := range entries {
		st.apply(e)
	}
}

func (st *state) apply(e entry) {
	k := e.key
	st.src[k.name] = e.src
	switch p := k.field(&st.c).(type) {
	case *string:
		*p = e.val.(string)
	case *bool:
		*p = e.val.(bool)
	case *int:
		*p = int(e.val.(int64))
	case *int64:
		*p = e.val.(int64)
	case *float64:
		*p = e.val.(float64)
	case *time.Duration:
		*p = e.val.(time.Duration)
	case *[]string:
		st.clearItems(k.name + "[")
		*p = []string{}
		for i, it := range e.items {
			*p = append(*p, it.val.(string))
			st.src[fmt.Sprintf("%s[%d]", k.name, i)] = it.src
		}
	case *map[string]string:
		for _, it := range e.items {
			v := it.val.(envItem)
			(*p)[v.Name] = v.Value
			st.src["env."+v.Name] = it.src
		}
	case *map[string]Ulimit:
		st.clearItems("ulimits.")
		*p = map[string]Ulimit{}
		for _, it := range e.items {
			v := it.val.(ulimitItem)
			(*p)[v.Name] = v.Ulimit
			st.src["ulimits."+v.Name] = it.src
		}
	case *[]Tmpfs:
		for _, it := range e.items {
			t := it.val.(Tmpfs)
			t.Options = slices.Clone(t.Options) // entries may be shared (parsedProfiles)
			i := slices.IndexFunc(*p, func(o Tmpfs) bool { return filepath.Clean(o.Path) == filepath.Clean(t.Path) })
			if i < 0 {
				i = len(*p)
				*p = append(*p, Tmpfs{})
			}
			(*p)[i] = t
			st.src[fmt.Sprintf("tmpfs[%d]", i)] = it.src
		}
	case *[]Bind:
		for _, it := range e.items {
			b := it.val.(bindItem)
			i := slices.IndexFunc(*p, func(o Bind) bool { return filepath.Clean(o.Target) == filepath.Clean(b.Target) })
			if i < 0 {
				i = len(*p)
				*p = append(*p, Bind{})
				st.bindSpecs = append(st.bindSpecs, "")
			}
			(*p)[i], st.bindSpecs[i] = b.Bind, b.Spec
			st.src[fmt.Sprintf("binds[%d]", i)] = it.src
		}
	}
}

func (st *state) clearItems(prefix string) {
	for key := range st.src {
		if strings.HasPrefix(key, prefix) {
			delete(st.src, key)
		}
	}
}

func unwrapPathError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// isBundledImage reports whether image is one of sbx's own.
func isBundledImage(image string) bool {
	for _, p := range images.Profiles {
		if tag, _ := images.TagFor(p); tag == image {
			return true
		}
	}
	return false
}
