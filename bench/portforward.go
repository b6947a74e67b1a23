package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// forwardServer is the web server both sides of the port-forward cases reach: the stdlib's,
// quiet, with a backlog of 128, serving /tmp/small (100 bytes) and /tmp/big (100 MiB).
const forwardServer = `import functools, http.server as s
open("/tmp/small", "wb").write(b"x" * 100)
with open("/tmp/big", "wb") as f:
    f.write(bytes(1 << 20) * 100)
class H(s.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass
s.ThreadingHTTPServer.request_queue_size = 128
s.ThreadingHTTPServer(("0.0.0.0", 8000), functools.partial(H, directory="/tmp")).serve_forever()`

// forwardCases run the same server in a sandbox (network none) reached through sbx
// port-forward, and in a container with the same image and limits reached through a port the
// engine publishes on 127.0.0.1 (docker run -p 127.0.0.1::8000): a small request on a new
// connection each, and a 100 MiB download.
func (b *bench) forwardCases() []Case {
	name, ctr := b.name("pf"), b.name("published")
	var once sync.Once
	var fwdURL, pubURL string
	var setupErr error
	prepare := func() error {
		once.Do(func() { fwdURL, pubURL, setupErr = b.startForward(name, ctr) })
		return setupErr
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Minute}
	fetch := func(url *string, path string, times int) func(int) (time.Duration, error) {
		return func(int) (time.Duration, error) {
			if err := prepare(); err != nil {
				return 0, err
			}
			url := *url + path
			start := time.Now()
			for range times {
				if err := getAll(client, url); err != nil {
					return 0, err
				}
			}
			return time.Since(start), nil
		}
	}
	return []Case{
		{Name: "port-forward: 10 small HTTP requests", SbxCmd: "sbx port-forward 0:8000, 10 x GET 100 B (a connection each)",
			RefCmd: "docker run -p 127.0.0.1::8000, 10 x GET 100 B", Runs: 30, Ratio: 1.5,
			Sbx: fetch(&fwdURL, "/small", 10), Docker: fetch(&pubURL, "/small", 10)},
		{Name: "port-forward: download 100 MiB", SbxCmd: "sbx port-forward 0:8000, GET 100 MiB",
			RefCmd: "docker run -p 127.0.0.1::8000, GET 100 MiB", Runs: 7, Ratio: 1.5,
			Sbx: fetch(&fwdURL, "/big", 1), Docker: fetch(&pubURL, "/big", 1),
			Done: func() {
				b.stopForward()
				_ = docker("rm", "-f", ctr).Run()
			}},
	}
}

func getAll(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// startForward starts the server in sandbox name and in container ctr, and sbx port-forward
// to the sandbox's; it returns both URLs once each answers.
func (b *bench) startForward(name, ctr string) (fwdURL, pubURL string, err error) {
	if out, err := b.sbxOut("create", "-n", name); err != nil {
		return "", "", fmt.Errorf("%v: %s", err, out)
	}
	if out, err := b.sbxOut("exec", "-n", name, "-d", "--wait-port", "8000", "--", "python3", "-c", forwardServer); err != nil {
		return "", "", fmt.Errorf("%v: %s", err, out)
	}
	pf := b.sbxCmd("port-forward", "-n", name, "0:8000")
	stdout, err := pf.StdoutPipe()
	if err != nil {
		return "", "", err
	}
	if err := pf.Start(); err != nil {
		return "", "", err
	}
	b.forward = pf
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return "", "", fmt.Errorf("sbx port-forward printed no URL: %v", err)
	}
	fwdURL = strings.TrimSpace(line)

	args := []string{"run", "-d", "--name", ctr, "-p", "127.0.0.1::8000"}
	for _, a := range b.hardening() {
		if a == "none" { // the one setting it cannot keep: the engine publishes from a network
			a = "bridge"
		}
		args = append(args, a)
	}
	if out, err := docker(append(args, b.image, "python3", "-c", forwardServer)...).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("docker run: %v: %s", err, out)
	}
	out, err := docker("port", ctr, "8000/tcp").Output()
	if err != nil {
		return "", "", fmt.Errorf("docker port: %v", err)
	}
	pubURL = "http://" + strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	client := &http.Client{Timeout: 5 * time.Second}
	for try := 0; ; try++ {
		if err = getAll(client, pubURL+"/small"); err == nil {
			break
		}
		if try == 300 {
			return "", "", fmt.Errorf("the published server never answered: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fwdURL, pubURL, nil
}

func (b *bench) stopForward() {
	if b.forward != nil {
		_ = b.forward.Process.Signal(os.Interrupt)
		_ = b.forward.Wait()
		b.forward = nil
	}
}
