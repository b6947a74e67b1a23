package engine

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

func TestConnectUnreachableNamesEndpoint(t *testing.T) {
	sock := "unix://" + filepath.Join(t.TempDir(), "missing.sock")
	_, err := Connect(context.Background(), Endpoint{Host: sock, Source: "DOCKER_HOST"}, nil)
	if err == nil {
		t.Fatal("Connect to a missing socket succeeded")
	}
	if code := errs.ExitCode(err); code != errs.CodeFailure {
		t.Errorf("exit code = %d, want %d", code, errs.CodeFailure)
	}
	if !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "from DOCKER_HOST") {
		t.Errorf("error %q does not name the endpoint and its source", err)
	}
	if hint := errs.Hint(err); !strings.Contains(hint, "DOCKER_HOST") || !strings.Contains(hint, "sbx doctor") {
		t.Errorf("hint %q lacks what to do", hint)
	}
}

// An engine that accepts connections but never answers must not hang sbx.
func TestConnectSilentEngineTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, err = Connect(context.Background(), Endpoint{Host: "tcp://" + ln.Addr().String(), Source: "DOCKER_HOST"}, nil)
	if err == nil || !strings.Contains(err.Error(), "no answer within 5s") {
		t.Fatalf("err = %v, want a timeout naming the limit", err)
	}
}

func TestConnectRefusesSSH(t *testing.T) {
	_, err := Connect(context.Background(), Endpoint{Host: "ssh://u@h", Source: "context remote"}, nil)
	if err == nil || !strings.Contains(err.Error(), "ssh") || errs.Hint(err) == "" {
		t.Fatalf("err = %v, want an ssh refusal with a hint", err)
	}
}
