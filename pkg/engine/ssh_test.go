package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestParseSSH(t *testing.T) {
	got, err := parseSSH("ssh://me@box:2222")
	if err != nil || got != (sshTarget{User: "me", Host: "box", Port: "2222"}) {
		t.Fatalf("parseSSH = %+v, %v", got, err)
	}
	want := []string{"-o", "ConnectTimeout=30", "-T", "-l", "me", "-p", "2222", "--", "box", "docker", "system", "dial-stdio"}
	if args := got.args("docker", "system", "dial-stdio"); !slices.Equal(args, want) {
		t.Fatalf("args = %q, want %q", args, want)
	}
	for _, bad := range []string{"ssh://me:pw@box", "ssh://box/var/run/docker.sock", "ssh://box?x=1", "ssh://-oProxyCommand=x", "ssh://-l@box", "ssh://"} {
		if _, err := parseSSH(bad); err == nil {
			t.Errorf("parseSSH(%q) accepted it", bad)
		}
	}
}

func TestSSHFailure(t *testing.T) {
	target := sshTarget{User: "root", Host: "127.0.0.1", Port: "2222"}
	for _, tt := range []struct {
		code          int
		stderr        string
		message, hint string
	}{
		{255, "@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n@@@@@@@@\nHost key verification failed.\n", "does not match the one in known_hosts", "ssh-keygen -R 127.0.0.1"},
		{255, "No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.\nHost key verification failed.\n", "not one known_hosts accepts", "ssh -p 2222 root@127.0.0.1"},
		{255, "root@127.0.0.1: Permission denied (publickey).\n", "authentication failed: root@127.0.0.1: Permission denied (publickey).", "ssh-add"},
		{127, "sh: 1: docker: not found\n", "no docker command: sh: 1: docker: not found", "install the docker CLI"},
		{255, "ssh: connect to host 127.0.0.1 port 2222: Connection refused\n", "failed: ssh: connect to host 127.0.0.1 port 2222: Connection refused", "ssh -p 2222 root@127.0.0.1 works"},
		{1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock\x1b[31m\n", "dial-stdio failed (exit 1): Cannot connect to the Docker daemon at unix:///var/run/docker.sock", "docker version"},
	} {
		err := sshFailure(target, tt.code, tt.stderr)
		var e *errs.Error
		if !errors.As(err, &e) || e.ExitCode() != errs.CodeFailure {
			t.Fatalf("%q: %v is not a failure", tt.stderr, err)
		}
		if !strings.Contains(err.Error(), tt.message) || !strings.Contains(e.Hint(), tt.hint) || strings.Contains(err.Error(), "\x1b") {
			t.Errorf("%q:\ngot  %q (hint %q)\nwant %q (hint %q)", tt.stderr, err, e.Hint(), tt.message, tt.hint)
		}
	}
}

func TestHeadWriterKeepsTheStart(t *testing.T) {
	w := &headWriter{limit: 4}
	for _, s := range []string{"ab", "cdef", "gh"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if w.String() != "abcd" {
		t.Fatalf("kept %q", w.String())
	}
}

func TestContextOverrides(t *testing.T) {
	dir := t.TempDir()
	writeContext(t, dir, "remote", "ssh://me@box", false)
	writeContext(t, dir, "other", "tcp://h:2375", false)
	base := map[string]string{"DOCKER_CONFIG": dir, "DOCKER_HOST": "unix:///elsewhere.sock"}
	ep, err := ResolveEndpoint(env(base), "/home/x", "remote")
	if err != nil || ep.Host != "ssh://me@box" || ep.Source != "context remote (--context)" {
		t.Fatalf("--context: %+v, %v", ep, err)
	}
	base["SBX_CONTEXT"] = "other"
	if ep, err = ResolveEndpoint(env(base), "/home/x", ""); err != nil || ep.Host != "tcp://h:2375" || ep.Source != "context other (SBX_CONTEXT)" {
		t.Fatalf("SBX_CONTEXT: %+v, %v", ep, err)
	}
	if ep, err = ResolveEndpoint(env(base), "/home/x", "default"); err != nil || ep.Host != "unix:///elsewhere.sock" {
		t.Fatalf("--context default with DOCKER_HOST: %+v, %v", ep, err)
	}
	if _, err = ResolveEndpoint(env(base), "/home/x", "missing"); err == nil || !strings.Contains(err.Error(), `"missing" (from --context) not found`) {
		t.Fatalf("a missing context: %v", err)
	}
	names, err := Contexts(env(base), "/home/x")
	if err != nil || !slices.Equal(names, []string{"default", "other", "remote"}) {
		t.Fatalf("Contexts = %q, %v", names, err)
	}
}
