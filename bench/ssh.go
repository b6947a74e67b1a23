package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// sshBench is sshd on a loopback port in front of this machine's engine, with keys of its
// own, and an ssh on PATH that uses them: the warm exec over ssh:// measures what the ssh
// transport costs sbx and the docker CLI alike.
type sshBench struct {
	once sync.Once
	err  error
	dir  string
	host string // ssh://root@127.0.0.1:PORT
	env  []string
	sshd *exec.Cmd
}

func (b *bench) sshSetup(s *sshBench) error {
	s.once.Do(func() { s.err = b.startSSH(s) })
	return s.err
}

func (b *bench) startSSH(s *sshBench) error {
	var err error
	if s.dir, err = os.MkdirTemp("", "sbx-bench-ssh-"); err != nil {
		return err
	}
	for _, key := range []string{"host", "user"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(s.dir, key)).CombinedOutput(); err != nil {
			return fmt.Errorf("ssh-keygen: %v: %s", err, out)
		}
	}
	pub := func(key string) string {
		data, _ := os.ReadFile(filepath.Join(s.dir, key+".pub"))
		return string(data)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "authorized_keys"), []byte(pub("user")), 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	_ = l.Close()
	conf := fmt.Sprintf("Port %s\nListenAddress 127.0.0.1\nHostKey %s\nPidFile %s\nAuthorizedKeysFile %s\nPasswordAuthentication no\nUsePAM no\nStrictModes no\n",
		port, filepath.Join(s.dir, "host"), filepath.Join(s.dir, "sshd.pid"), filepath.Join(s.dir, "authorized_keys"))
	if err := os.WriteFile(filepath.Join(s.dir, "sshd_config"), []byte(conf), 0o600); err != nil {
		return err
	}
	s.sshd = exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(s.dir, "sshd_config"))
	stderr, err := s.sshd.StderrPipe()
	if err != nil {
		return err
	}
	if err := s.sshd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() && !strings.Contains(sc.Text(), "Server listening on") {
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if err := os.WriteFile(filepath.Join(s.dir, "known_hosts"), []byte("[127.0.0.1]:"+port+" "+pub("host")), 0o644); err != nil {
		return err
	}
	client := fmt.Sprintf("Host *\n  IdentityFile %s\n  IdentitiesOnly yes\n  IdentityAgent none\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  BatchMode yes\n",
		filepath.Join(s.dir, "user"), filepath.Join(s.dir, "known_hosts"))
	bin := filepath.Join(s.dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.dir, "ssh_config"), []byte(client), 0o644); err != nil {
		return err
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nexec /usr/bin/ssh -F %s \"$@\"\n", filepath.Join(s.dir, "ssh_config"))
	if err := os.WriteFile(filepath.Join(bin, "ssh"), []byte(wrapper), 0o755); err != nil {
		return err
	}
	s.host = "ssh://root@127.0.0.1:" + port
	s.env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "DOCKER_HOST=" + s.host}
	if out, err := b.sshSbx(s, "exec", "-n", b.name("ssh"), "--", "true").CombinedOutput(); err != nil {
		return fmt.Errorf("creating the sandbox over ssh: %v: %s", err, out)
	}
	return nil
}

func (b *bench) sshSbx(s *sshBench, args ...string) *exec.Cmd {
	c := b.sbxCmd(args...)
	c.Env = append(append([]string(nil), c.Env...), s.env...)
	return c
}

func (b *bench) sshCase() Case {
	s := &sshBench{}
	return Case{Name: "warm exec over ssh", SbxCmd: "DOCKER_HOST=ssh://root@127.0.0.1:PORT sbx exec -- true",
		RefCmd: "docker -H ssh://root@127.0.0.1:PORT exec CTR true", Runs: 20, Ratio: 1.0,
		Sbx: func(int) (time.Duration, error) {
			if err := b.sshSetup(s); err != nil {
				return 0, err
			}
			return timed(b.sshSbx(s, "exec", "-n", b.name("ssh"), "--", "true"))
		},
		Docker: func(int) (time.Duration, error) {
			if err := b.sshSetup(s); err != nil {
				return 0, err
			}
			c := docker("-H", s.host, "exec", "sbx-"+b.name("ssh"), "true")
			c.Env = append(os.Environ(), s.env[0])
			return timed(c)
		},
		Done: func() {
			if s.sshd != nil {
				_ = s.sshd.Process.Kill()
				_ = s.sshd.Wait()
			}
			if s.dir != "" {
				_ = os.RemoveAll(s.dir)
			}
		}}
}
