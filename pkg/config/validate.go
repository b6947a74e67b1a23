package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sbx-sandbox/sbx/internal/lazyre"
	"github.com/sbx-sandbox/sbx/pkg/cacerts"
	"github.com/sbx-sandbox/sbx/pkg/egress"
)

var (
	hostNameRE = lazyre.New(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)
	capNameRE  = lazyre.New(`^[A-Z][A-Z0-9_]*$`)
	apparmorRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9_./-]*$`)
	octalRE    = lazyre.New(`^[0-7]{3,4}$`)
)

// ProtectedPaths are host paths no bind (and no project root) may be, be inside, or contain.
var ProtectedPaths = []string{"/etc", "/proc", "/sys", "/dev", "/root", "/boot", "/run", "/var/run", "/usr", "/lib", "/var/lib/docker"}

// HomeCredentialDirs are the entries of $HOME that hold credentials; $HOME itself is refused too.
var HomeCredentialDirs = []string{".ssh", ".aws", ".gnupg", ".docker", ".kube", ".config", ".netrc", ".npmrc"}

var engineSockets = []string{"docker.sock", "containerd.sock"}

// kernelTargets are container paths the engine manages; nothing may be mounted over them.
var kernelTargets = []string{"/proc", "/sys", "/dev"}

var ulimitNames = []string{"core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc", "rss", "rtprio", "rttime", "sigpending", "stack"}

// Validate checks a resolved configuration and returns what it refuses and what it only
// warns about. Resolve calls it, having read the certificates caCerts names; it reads the file
// system only to follow bind sources and to find a seccomp profile.
func Validate(r *Resolved) (refused, warnings []Problem) {
	v := &validator{r: r, c: &r.Config}
	v.enums()
	v.image()
	v.user()
	v.tmpfs()
	v.network()
	v.capabilities()
	v.limits()
	v.env()
	v.binds()
	v.projectRoot()
	v.securityProfiles()
	v.caCerts()
	v.egress()
	v.lists()
	v.setup()
	v.tools()
	v.protectedEntries()
	v.workspaceExclude()
	v.ceilings()
	return v.refused, v.warnings
}

type validator struct {
	r        *Resolved
	c        *Config
	refused  []Problem
	warnings []Problem
}

func (v *validator) refuse(key, value, reason, fix string) {
	v.refused = append(v.refused, Problem{Severity: SeverityError, Key: key, Source: v.src(key), Value: value, Reason: reason, Fix: fix})
}

func (v *validator) warn(key, value, reason, fix string) {
	v.warnings = append(v.warnings, Problem{Severity: SeverityWarning, Key: key, Source: v.src(key), Value: value, Reason: reason, Fix: fix})
}

// src is the source of a key path, falling back to its list's or map's source.
func (v *validator) src(key string) Source {
	if s, ok := v.r.Sources[key]; ok {
		return s
	}
	if i := strings.IndexAny(key, "[."); i > 0 {
		if s, ok := v.r.Sources[key[:i]]; ok {
			return s
		}
	}
	return Source{Layer: LayerDefault}
}

func (v *validator) enums() {
	for _, k := range registry {
		if len(k.enum) == 0 {
			continue
		}
		val := *k.field(v.c).(*string)
		if !slices.Contains(k.enum, val) {
			v.refuse(k.name, val, "not one of "+strings.Join(k.enum, ", "), "set "+k.name+" to one of "+strings.Join(k.enum, ", "))
		}
	}
	if !filepath.IsAbs(v.c.Workdir) {
		v.refuse("workdir", v.c.Workdir, "not an absolute path", "set workdir to a path such as /workspace/src")
	}
}

func (v *validator) image() {
	img := v.c.Image
	switch {
	case img == "" && !slices.Contains(lookupKey("profile").enum, v.c.Profile):
		// the profile problem already says why there is no image
	case img == "":
		v.refuse("image", img, "no image is set", "set image, or a profile: sandbox, common or browser")
	case strings.ContainsAny(img, " \t\r\n"):
		v.refuse("image", img, "an image reference has no spaces", "set image to a reference such as debian:bookworm-slim")
	case !isBundledImage(img):
		v.warn("image", img, "not one of sbx's bundled images: it runs with the same hardening, but sbx cannot vouch for its contents",
			"use profile sandbox, common or browser unless you trust this image")
	}
}

func (v *validator) user() {
	u := v.c.User
	uid, gid, ok := strings.Cut(u, ":")
	if !ok || !isNumeric(uid) || !isNumeric(gid) {
		v.refuse("user", u, "not a numeric uid:gid (names are looked up inside the image, which sbx does not trust)",
			"set user to numbers such as 1000:1000, or root (0:0) if you really mean it")
	}
}

func (v *validator) tmpfs() {
	for i, t := range v.c.Tmpfs {
		key := fmt.Sprintf("tmpfs[%d]", i)
		val := t.String()
		p := filepath.Clean(t.Path)
		switch {
		case !filepath.IsAbs(t.Path):
			v.refuse(key, val, "the mount path is not absolute", "write it as /path:size=256m; in a [flow, list] commas separate entries, so quote an entry with options: ['/x:size=1m,exec']")
			continue
		case p == "/":
			v.refuse(key, val, "a tmpfs cannot replace the root file system", "mount it at a directory such as /cache")
			continue
		case underAny(p, kernelTargets) != "":
			v.refuse(key, val, "the engine manages "+underAny(p, kernelTargets), "use shmSize for /dev/shm, or mount elsewhere")
			continue
		case within(p, WorkspaceTarget):
			v.refuse(key, val, WorkspaceTarget+" holds the project", "mount it elsewhere, e.g. /cache")
			continue
		}
		hasSize, exec, noexec := false, false, false
		for _, o := range t.Options {
			name, value, _ := strings.Cut(o, "=")
			switch name {
			case "suid":
				v.refuse(key, val, "suid is refused: setuid programs on a writable mount are a way to gain privileges", "remove suid (nosuid is the default)")
			case "dev":
				v.refuse(key, val, "dev is refused: device files on a writable mount can reach host devices", "remove dev (nodev is the default)")
			case "nosuid", "nodev", "ro", "rw":
			case "exec":
				exec = true
			case "noexec":
				noexec = true
			case "size":
				hasSize = true
				if n, err := ParseSize(value); err != nil || n == 0 {
					v.refuse(key, val, "size="+value+" is not a size above 0 (0 would mean unlimited)", "write a size such as size=256m")
				}
			case "mode":
				if !octalRE().MatchString(value) {
					v.refuse(key, val, "mode="+value+" is not an octal mode", "write a mode such as mode=1777")
				}
			case "uid", "gid", "nr_inodes":
				if !isNumeric(value) {
					v.refuse(key, val, o+" is not a number", "write it as "+name+"=1000")
				}
			default:
				v.refuse(key, val, "unknown tmpfs option "+o, "use size, mode, uid, gid, nr_inodes, exec, noexec, nosuid, nodev, ro or rw")
			}
		}
		if exec && noexec {
			v.refuse(key, val, "both exec and noexec are set", "keep one of them")
		}
		if !hasSize {
			v.refuse(key, val, "no size: an uncapped tmpfs can take the sandbox's whole memory", "add size=, e.g. "+t.Path+":size=256m")
		}
	}
}

func (v *validator) network() {
	n := v.c.Network
	switch {
	case n == "":
		v.refuse("network", n, "no network is set", "set network to none or bridge")
	case strings.EqualFold(n, "host"):
		v.refuse("network", n, "host shares the host's network stack: the sandbox could reach every service listening on the host's loopback and bind its ports",
			"use none (no network) or bridge (outbound access)")
	case strings.EqualFold(n, "none") && n != "none", strings.EqualFold(n, "bridge") && n != "bridge", strings.EqualFold(n, "default") && n != "default":
		v.refuse("network", n, "network names are case-sensitive: the engine knows no network "+n,
			"write it as "+strings.ToLower(n))
	case len(n) >= len("container:") && strings.EqualFold(n[:len("container:")], "container:"):
		switch rest := n[len("container:"):]; {
		case !v.c.DangerouslyAllowContainerNamespaceJoin:
			v.refuse("network", n, "joining another container's network namespace gives the sandbox everything that container can reach",
				"use none or bridge; or, if you accept that, set dangerouslyAllowContainerNamespaceJoin: true in a config file")
		case rest == "":
			v.refuse("network", n, "no container is named", "write it as container:NAME")
		case !strings.HasPrefix(n, "container:"):
			v.refuse("network", n, "network modes are case-sensitive", "write it as container:"+rest)
		}
	case !isNetName(n):
		v.refuse("network", n, "not a network name", "use none, bridge or the name of a network from docker network ls")
	}
}

func (v *validator) capabilities() {
	if !slices.Contains(v.c.CapDrop, "ALL") {
		v.refuse("capDrop", formatValue(nil, &v.c.CapDrop), "does not include ALL, so the sandbox keeps Docker's default capabilities (CHOWN, SETUID, NET_RAW, ...)",
			"keep ALL in capDrop; to bind ports below 1024 add NET_BIND_SERVICE to capAdd")
	}
	for i, c := range v.c.CapDrop {
		if c != "ALL" && !capNameRE().MatchString(c) {
			v.refuse(fmt.Sprintf("capDrop[%d]", i), c, "not a capability name", "write names such as ALL or NET_RAW")
		}
	}
	for i, c := range v.c.CapAdd {
		if c == "NET_BIND_SERVICE" {
			continue
		}
		reason := "only NET_BIND_SERVICE may be added (as Kubernetes' restricted profile allows); " + c + " widens what a process can do to the kernel"
		if c == "ALL" {
			reason = "ALL would give back every capability, including SYS_ADMIN"
		}
		v.refuse(fmt.Sprintf("capAdd[%d]", i), c, reason, "remove it from capAdd")
	}
}

func (v *validator) limits() {
	c := v.c
	if c.Memory < MinMemory {
		v.refuse("memory", FormatSize(c.Memory), "below the minimum of "+FormatSize(MinMemory), "set memory to 16m or more, such as 512m or 2g")
	}
	if c.MemorySwap < c.Memory {
		v.refuse("memorySwap", FormatSize(c.MemorySwap), "smaller than memory ("+FormatSize(c.Memory)+")", "leave memorySwap out for no swap, or set it to at least memory")
	}
	if c.ShmSize <= 0 {
		v.refuse("shmSize", FormatSize(c.ShmSize), "must be more than 0", "set shmSize such as 64m")
	}
	cpus := strconv.FormatFloat(c.CPUs, 'f', -1, 64)
	switch {
	case c.CPUs < 0.01:
		v.refuse("cpus", cpus, "must be at least 0.01", "set cpus such as 1 or 0.5")
	case v.r.HostCPUs > 0 && c.CPUs > float64(v.r.HostCPUs):
		v.refuse("cpus", cpus, fmt.Sprintf("more than this host's %d CPUs; the engine would refuse the sandbox", v.r.HostCPUs),
			fmt.Sprintf("set cpus to at most %d", v.r.HostCPUs))
	}
	if c.PidsLimit < MinPidsLimit {
		v.refuse("pidsLimit", strconv.FormatInt(c.PidsLimit, 10), fmt.Sprintf("below the minimum of %d (0 and -1 would mean unlimited, which lets a fork bomb take the host)", MinPidsLimit),
			"set pidsLimit to 16 or more, such as 256")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Ulimits)) {
		u, key := c.Ulimits[name], "ulimits."+name
		switch {
		case !slices.Contains(ulimitNames, name):
			v.refuse(key, name, "unknown limit", "use one of "+strings.Join(ulimitNames, ", "))
		case u.Soft > u.Hard:
			v.refuse(key, u.String(), "the soft limit is above the hard limit", "write it as SOFT:HARD with SOFT <= HARD")
		}
	}
	if c.IdleStop != 0 && c.IdleStop < time.Second {
		v.refuse("idleStop", FormatDuration(c.IdleStop), "must be 0 (never) or at least 1s", "set idleStop such as 15m, or 0")
	}
	if c.Pool < 0 || c.Pool > MaxPool {
		v.refuse("pool", strconv.Itoa(c.Pool), fmt.Sprintf("must be from 0 to %d", MaxPool), "set it to 0 for no pool, or the number of started sandboxes to keep ready")
	}
	if c.MaxRunning < 0 {
		v.refuse("maxRunning", strconv.Itoa(c.MaxRunning), "must not be negative", "set it to 0 for no cap, or the number of sandboxes that may run at once")
	}
	if c.Prune.IdleHours < 0 {
		v.refuse("prune.idleHours", strconv.Itoa(c.Prune.IdleHours), "must not be negative", "set it to 0 to disable, or a number of hours")
	}
	if c.Prune.MaxAgeDays < 0 {
		v.refuse("prune.maxAgeDays", strconv.Itoa(c.Prune.MaxAgeDays), "must not be negative", "set it to 0 to disable, or a number of days")
	}
}

func (v *validator) env() {
	for _, name := range slices.Sorted(maps.Keys(v.c.Env)) {
		key, value := "env."+name, MaskEnv(name, v.c.Env[name])
		switch {
		case !isEnvName(name):
			v.refuse(key, value, "not a variable name (letters, digits and _, not starting with a digit)", "rename it")
		case IsSecretName(name):
			v.refuse(key, value, "looks like a secret: values in env are stored in the sandbox's container config, readable by anyone who can inspect it",
				fmt.Sprintf("remove it from env and add %s to passEnv, so each exec gets it from your environment without storing it", name))
		case strings.ContainsRune(v.c.Env[name], 0):
			v.refuse(key, value, "the value contains a NUL byte", "remove the NUL byte")
		}
	}
	for i, name := range v.c.PassEnv {
		if !isEnvName(name) {
			v.refuse(fmt.Sprintf("passEnv[%d]", i), name, "not a variable name (letters, digits and _, not starting with a digit)", "list host variable names such as GITHUB_TOKEN")
		}
	}
}

// binds checks every bind in both its written (normalised) form and its canonical form, so
// neither ../ nor a symlink can smuggle a protected path in.
func (v *validator) binds() {
	c := v.c
	reserved := append([]string{WorkspaceTarget, InternalDir, cacerts.MountDir}, tmpfsPaths(c.Tmpfs)...)
	for i, b := range c.Binds {
		key := fmt.Sprintf("binds[%d]", i)
		spec := b.String()
		written := b.Source
		if i < len(v.r.bindSpecs) && v.r.bindSpecs[i] != "" {
			spec = v.r.bindSpecs[i]
			written, _, _ = strings.Cut(spec, ":")
		}
		if !filepath.IsAbs(written) {
			v.refuse(key, spec, "the host path "+written+" is not absolute", "write the full path, e.g. "+filepath.Join(v.r.ProjectRoot, written)+":"+b.Target)
			continue
		}
		norm, canon := filepath.Clean(written), b.Source
		forms := []string{norm}
		if canon != norm {
			forms = append(forms, canon)
		}
		if reason := v.protected(forms); reason != "" {
			v.refuse(key, spec, "the host path "+reason, "bind a directory inside the project instead; this path is never mounted into a sandbox")
			continue
		}
		if _, err := os.Stat(canon); err != nil {
			v.refuse(key, spec, "the host path does not exist", "create it first, or remove the bind")
			continue
		}
		if !c.DangerouslyAllowExternalBindSources {
			for _, f := range forms {
				if !within(f, v.r.ProjectRoot) {
					v.refuse(key, spec, "the host path "+describe(norm, f)+" is outside the project root "+v.r.ProjectRoot,
						"bind a path inside the project; or, if you accept exposing it, set dangerouslyAllowExternalBindSources: true in a config file")
					break
				}
			}
		}
		t := filepath.Clean(b.Target)
		switch {
		case !filepath.IsAbs(b.Target):
			v.refuse(key, spec, "the container path "+b.Target+" is not absolute", "write it as /data or similar")
		case t == "/" || underAny(t, kernelTargets) != "":
			v.refuse(key, spec, "nothing may be mounted over "+t, "mount it elsewhere, e.g. /data")
		case underAny(t, reserved) != "" && !c.DangerouslyAllowReservedTargets:
			v.refuse(key, spec, "the container path is at or under "+underAny(t, reserved)+", which sbx itself uses",
				"mount it elsewhere, e.g. /data; or set dangerouslyAllowReservedTargets: true in a config file")
		}
	}
}

// projectRoot refuses to mount a project root that is a protected path, such as $HOME when
// sbx runs outside any project.
func (v *validator) projectRoot() {
	if v.c.Workspace != WorkspaceRO && v.c.Workspace != WorkspaceRW && v.c.Workspace != WorkspaceOverlay {
		return
	}
	root := v.r.ProjectRoot
	if reason := v.protected([]string{root}); reason != "" {
		v.refuse("workspace", root, fmt.Sprintf("the project root (from %s) %s; mounting it at %s would expose it to the sandbox", v.r.ProjectRootFrom, reason, WorkspaceTarget),
			"cd into a project directory or pass --project DIR; or set workspace: none")
	}
	// The overlay's layers are named in one mount option string, where these separate values.
	if v.c.Workspace == WorkspaceOverlay && strings.ContainsAny(root, ",:\\") {
		v.refuse("workspace", WorkspaceOverlay, "the project root "+root+" holds a comma, colon or backslash, which an overlay mount cannot name",
			"rename or move the project, or set workspace: ro or rw")
	}
}

// protected says why the first of forms (written, then canonical) that is a protected path is
// refused, or "" when none is.
func (v *validator) protected(forms []string) string {
	home := v.r.home
	for _, p := range forms {
		shown := p
		if p != forms[0] {
			shown = forms[0] + " resolves through symlinks to " + p + ", which"
		}
		if p == "/" {
			return shown + " is the host's root directory"
		}
		for _, base := range protectedPaths() {
			if home != "" && within(home, base) && within(p, home) && p != home {
				continue // a home under a protected path (root's /root) is judged as a home
			}
			if r := relation(p, base, "a protected system path"); r != "" {
				return shown + " " + r
			}
		}
		if slices.Contains(engineSockets, filepath.Base(p)) {
			return shown + " is a container engine socket"
		}
		if s := v.r.dockerSocket; s != "" && within(s, p) {
			return shown + " " + relation(p, s, "the engine socket")
		}
		if home != "" {
			if p == home || within(home, p) {
				return shown + " " + relation(p, home, "your home directory")
			}
			for _, d := range HomeCredentialDirs {
				if r := relation(p, filepath.Join(home, d), "a credentials path"); r != "" {
					return shown + " " + r
				}
			}
		}
	}
	return ""
}

// protectedPaths lists ProtectedPaths and their canonical forms (/var/run is often /run).
// They are system paths, resolved once per process and only when a path is judged (a
// workspace or a bind): resolving them for each of the sandboxes sbx ls shows was a quarter
// of its work.
var protectedPaths = sync.OnceValue(func() []string {
	var out []string
	for _, p := range ProtectedPaths {
		for _, q := range []string{p, canonical(p)} {
			if !slices.Contains(out, q) {
				out = append(out, q)
			}
		}
	}
	return out
})

// relation describes how p relates to a protected path: is it, is inside it, or contains it.
func relation(p, protected, what string) string {
	switch {
	case p == protected:
		return "is " + what
	case within(p, protected):
		return "is inside " + what + " " + protected
	case within(protected, p):
		return "contains " + what + " " + protected
	}
	return ""
}

func describe(written, form string) string {
	if written == form {
		return written
	}
	return written + " (resolving to " + form + ")"
}

func (v *validator) securityProfiles() {
	switch sp := v.c.SeccompProfile; {
	case sp == "":
	case strings.EqualFold(sp, "unconfined"):
		v.refuse("seccompProfile", sp, "unconfined turns off the system-call filter that keeps most of the kernel out of reach", "remove seccompProfile to use sbx's built-in profile")
	case !filepath.IsAbs(sp):
		v.refuse("seccompProfile", sp, "not an absolute path", "write the full path of the profile's JSON file")
	default:
		if fi, err := os.Stat(sp); err != nil || !fi.Mode().IsRegular() {
			v.refuse("seccompProfile", sp, "the profile file does not exist", "check the path, or remove seccompProfile to use the engine's default")
		}
	}
	switch ap := v.c.ApparmorProfile; {
	case ap == "":
	case strings.EqualFold(ap, "unconfined"):
		v.refuse("apparmorProfile", ap, "unconfined turns off AppArmor's confinement", "remove apparmorProfile to use the engine's default profile")
	case !apparmorRE().MatchString(ap):
		v.refuse("apparmorProfile", ap, "not an AppArmor profile name", "use the name of a loaded profile (aa-status lists them)")
	}
	switch rt := v.c.Runtime; {
	case rt == "":
	case !isNetName(rt):
		v.refuse("runtime", rt, "not a runtime name", "use a runtime the engine knows, such as runc or runsc (docker info lists them)")
	case v.c.Isolation == IsolationGVisor:
		v.refuse("runtime", rt, "isolation: gvisor already picks the runtime ("+GVisorRuntime+"), so the two disagree",
			"remove runtime to run under gVisor, or set isolation: container to run under "+rt)
	case rt == GVisorRuntime:
		v.refuse("runtime", rt, "sbx's gVisor runtime is chosen by isolation: gvisor, which also changes how sbx runs commands there",
			"remove runtime and set isolation: gvisor")
	}
	if v.c.Isolation == IsolationGVisor && v.c.IdleStop != 0 {
		v.refuse("idleStop", FormatDuration(v.c.IdleStop), "a sandbox stops itself through sbx's agent, which under gVisor cannot see the lock sbx holds while it works in the sandbox (gVisor keeps file locks to itself)",
			"set idleStop to 0 (sbx stop, or sbx prune, stops it instead), or use isolation: container")
	}
}

func (v *validator) caCerts() {
	var e *cacerts.Error
	switch err := v.r.caErr; {
	case err == nil:
	case errors.As(err, &e):
		v.refuse("caCerts", v.c.CACerts, e.Reason, e.Fix)
	default:
		v.refuse("caCerts", v.c.CACerts, err.Error(), "name a readable PEM file or directory, or host")
	}
}

// egress checks each destination on its own, so a refusal names the entry's index and line.
// The proxy is the sandbox's only way out, which a sandbox with a network of its own already
// has around it: egress with any network but none would filter nothing.
func (v *validator) egress() {
	for i, text := range v.c.Egress {
		if _, err := egress.Expand([]string{text}); err != nil {
			for _, e := range err.(egress.RuleErrors) {
				v.refuse(fmt.Sprintf("egress[%d]", i), text, e.Reason, e.Fix)
			}
		}
	}
	if n := v.c.Network; len(v.c.Egress) > 0 && n != "none" {
		v.refuse("egress", formatList(v.c.Egress), "egress works only with network none: with network "+n+" the sandbox reaches every destination directly, so an allowlist would filter nothing",
			"set network: none to reach only the listed destinations, or drop egress to keep network "+n)
	}
}

func (v *validator) lists() {
	for i, d := range v.c.DNS {
		if net.ParseIP(d) == nil {
			v.refuse(fmt.Sprintf("dns[%d]", i), d, "not an IP address", "write addresses such as 1.1.1.1")
		}
	}
	for i, h := range v.c.ExtraHosts {
		name, ip, ok := strings.Cut(h, ":")
		if !ok || !hostNameRE().MatchString(name) || (ip != "host-gateway" && net.ParseIP(ip) == nil) {
			v.refuse(fmt.Sprintf("extraHosts[%d]", i), h, "not NAME:IP", "write entries such as db.local:10.0.0.5")
		}
	}
}

// setupPackage is a package as sbx hands it to apt-get, npm or pip: a name with an optional
// version or range, never an option (a leading "-") and nothing a shell would read.
var setupPackage = lazyre.New(`^[A-Za-z0-9@][A-Za-z0-9@/._~^<>=!*+:,\[\]-]*$`)

func (v *validator) setup() {
	for _, l := range []struct {
		key, example string
		list         []string
	}{{"setup.apt", "bc or bc=1.07.1-3+b1", v.c.Setup.Apt}, {"setup.npm", "typescript or typescript@5", v.c.Setup.Npm}, {"setup.pip", "requests or requests==2.32.3", v.c.Setup.Pip}} {
		for i, p := range l.list {
			if len(p) > 214 || !setupPackage().MatchString(p) {
				v.refuse(fmt.Sprintf("%s[%d]", l.key, i), p, "not a package name with an optional version", "write one package a entry, such as "+l.example)
			}
		}
	}
	for i, c := range v.c.Setup.Run {
		if strings.TrimSpace(c) == "" || strings.ContainsRune(c, 0) {
			v.refuse(fmt.Sprintf("setup.run[%d]", i), c, "an empty command", "remove the entry, or write a shell command such as: make -C /opt/tool install")
		}
	}
}

func (v *validator) tools() {
	for _, list := range []string{"tools.allow", "tools.deny"} {
		for i, pat := range *lookupKey(list).field(v.c).(*[]string) {
			key := fmt.Sprintf("%s[%d]", list, i)
			if _, err := path.Match(pat, ""); errors.Is(err, path.ErrBadPattern) || pat == "" {
				v.refuse(key, pat, "not a valid glob", "use tool names or * patterns such as exec or *")
				continue
			}
			if !slices.ContainsFunc(ToolNames, func(t string) bool { ok, _ := path.Match(pat, t); return ok }) {
				fix := "the tools are " + strings.Join(ToolNames, ", ")
				if s := closest(pat, ToolNames); s != "" {
					fix = fmt.Sprintf("did you mean %q? %s", s, fix)
				}
				v.warn(key, pat, "matches no tool", fix)
			}
		}
	}
}

func (v *validator) protectedEntries() {
	for i, p := range v.c.ProtectedPaths {
		if clean := path.Clean(p); p == "" || path.IsAbs(p) || clean != p || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
			v.refuse(fmt.Sprintf("protectedPaths[%d]", i), p, "not a clean path inside the project, relative to its root",
				"write paths such as .git/hooks or .vscode")
		}
	}
}

// ceilings refuses limits that would refuse every value, so a typo cannot look like a policy.
func (v *validator) ceilings() {
	l := v.c.Limits
	if l.Memory < MinMemory {
		v.refuse("limits.memory", FormatSize(l.Memory), "below the minimum memory of "+FormatSize(MinMemory), "set limits.memory such as 8g")
	}
	if l.CPUs < 0.01 {
		v.refuse("limits.cpus", formatFloat(l.CPUs), "must be at least 0.01", "set limits.cpus such as 2")
	}
	if l.PidsLimit < MinPidsLimit {
		v.refuse("limits.pidsLimit", formatInt(l.PidsLimit), fmt.Sprintf("below the minimum pidsLimit of %d", MinPidsLimit), "set limits.pidsLimit such as 4096")
	}
	if l.TmpfsSize <= 0 {
		v.refuse("limits.tmpfsSize", FormatSize(l.TmpfsSize), "must be more than 0", "set limits.tmpfsSize such as 1g")
	}
	if l.Timeout <= 0 {
		v.refuse("limits.timeout", FormatDuration(l.Timeout), "must be more than 0", "set limits.timeout such as 1h")
	}
}

func closest(s string, options []string) string {
	best, dist := "", 3
	for _, o := range options {
		if d := levenshtein(s, o); d < dist {
			best, dist = o, d
		}
	}
	return best
}

func tmpfsPaths(ts []Tmpfs) []string {
	var out []string
	for _, t := range ts {
		out = append(out, filepath.Clean(t.Path))
	}
	return out
}

// within reports whether p is dir or inside it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// underAny returns the first of dirs that p is at or under, or "".
func underAny(p string, dirs []string) string {
	for _, d := range dirs {
		if within(p, d) {
			return d
		}
	}
	return ""
}

func (v *validator) workspaceExclude() {
	for i, p := range v.c.WorkspaceExclude {
		if err := ValidWorkspaceExclude(p); err != nil {
			v.refuse(fmt.Sprintf("workspaceExclude[%d]", i), p, err.Error(), "write a .gitignore-style pattern such as node_modules/, *.log or /build")
		}
	}
}

// ValidWorkspaceExclude refuses a workspaceExclude pattern sbx does not take: no "!", which
// would bring back what another layer left out, and no "\" or "[" classes.
func ValidWorkspaceExclude(p string) error {
	switch {
	case strings.TrimSpace(p) == "" || strings.Trim(p, "/") == "":
		return errors.New("an empty pattern")
	case strings.HasPrefix(p, "!"):
		return errors.New(`"!" patterns are not taken: an exclude can only leave more out`)
	case strings.ContainsAny(p, "\\["):
		return errors.New(`"\" and "[" are not taken; use * and ?`)
	}
	for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
		if seg == ".." || seg == "." || seg == "" {
			return errors.New("an empty, . or .. segment")
		}
	}
	return nil
}
