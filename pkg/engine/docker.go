package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/docker/docker/client"
	"github.com/docker/go-connections/tlsconfig"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// ConnectTimeout bounds the first contact with the engine, so a dead endpoint fails fast.
const ConnectTimeout = 5 * time.Second

// Connect builds a client for ep with API version negotiation and checks that the engine
// answers within ConnectTimeout. With debug non-nil, every API call is logged to it.
func Connect(ctx context.Context, ep Endpoint, debug io.Writer) (*client.Client, error) {
	cli, ssh, err := open(ep, debug)
	if err != nil {
		return nil, err
	}
	timeout := ConnectTimeout
	if ssh != nil {
		timeout = sshConnectTimeout
	}
	pingCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ping, err := cli.Ping(pingCtx)
	if err != nil {
		_ = cli.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if ssh != nil && ssh.failure() != nil {
			return nil, fmt.Errorf("cannot reach the Docker engine at %s (from %s): %w", ep.Host, ep.Source, ssh.failure())
		}
		return nil, unreachable(ep, err, timeout)
	}
	// Negotiate from the ping we already have; the client would otherwise ping again.
	cli.NegotiateAPIVersionPing(ping)
	return cli, nil
}

// Open builds a client for ep as Connect does, without contacting the engine: its first
// call negotiates the API version. For a command that may need no engine at all (a warm
// exec, which its sandbox's agent runs); an engine that does not answer then fails that
// first call instead.
func Open(ep Endpoint, debug io.Writer) (*client.Client, error) {
	cli, _, err := open(ep, debug)
	return cli, err
}

func open(ep Endpoint, debug io.Writer) (*client.Client, *sshDialer, error) {
	opts := []client.Opt{client.WithAPIVersionNegotiation()}
	var ssh *sshDialer
	if strings.HasPrefix(ep.Host, "ssh://") {
		target, err := parseSSH(ep.Host)
		if err != nil {
			return nil, nil, errs.Failure(fmt.Errorf("engine endpoint %q (from %s): %w", ep.Host, ep.Source, err),
				"write the endpoint as ssh://[user@]host[:port]")
		}
		ssh = &sshDialer{target: target}
		// The client needs an http address to speak to; the dialer decides where it goes.
		opts = append(opts, client.WithHost("http://docker.example.com"), client.WithDialContext(ssh.dial))
	}
	if ep.TLS != nil {
		tlsCfg, err := clientTLS(ep.TLS)
		if err != nil {
			return nil, nil, errs.Failure(fmt.Errorf("loading TLS files for %s (from %s): %w", ep.Host, ep.Source, err),
				"check DOCKER_CERT_PATH or the context's TLS files")
		}
		// The client configures the socket on whatever *http.Transport it holds, so ours goes first.
		opts = append(opts, client.WithHTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}))
	}
	if ssh == nil {
		opts = append(opts, client.WithHost(ep.Host))
	}
	if debug != nil {
		opts = append(opts, client.WithTraceProvider(newDebugTracer(debug)))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, nil, errs.Failure(fmt.Errorf("engine endpoint %q (from %s): %w", ep.Host, ep.Source, err),
			"set DOCKER_HOST to a valid address such as unix:///var/run/docker.sock")
	}
	return cli, ssh, nil
}

// Unreachable is the error for an engine that did not answer at ep.
func Unreachable(ep Endpoint, cause error) error {
	return unreachable(ep, cause, ConnectTimeout)
}

func unreachable(ep Endpoint, cause error, timeout time.Duration) error {
	if errors.Is(cause, context.DeadlineExceeded) {
		cause = fmt.Errorf("no answer within %s", timeout)
	}
	return errs.Failure(
		fmt.Errorf("cannot reach the Docker engine at %s (from %s): %w", ep.Host, ep.Source, cause),
		fmt.Sprintf("start the engine at %s (for example \"sudo systemctl start docker\"), or set DOCKER_HOST to an engine that runs; \"sbx doctor\" checks the setup", ep.Host))
}

func clientTLS(t *TLS) (*tls.Config, error) {
	cfg, err := tlsconfig.Client(tlsconfig.Options{
		CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
		ExclusiveRootPools: true, InsecureSkipVerify: t.SkipVerify,
	})
	if err != nil {
		return nil, err
	}
	return cfg, nil
}
