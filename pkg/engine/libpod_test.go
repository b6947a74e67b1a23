package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"
)

// A Podman network is created through Podman's own API, without DNS, and its refusals keep
// their meaning: a taken name is a conflict, a taken subnet ErrSubnetUsed.
func TestCreatePodmanNetwork(t *testing.T) {
	var got map[string]any
	answer := func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v4.0.0/libpod/networks/create" {
			t.Errorf("%s %s, want POST /v4.0.0/libpod/networks/create", r.Method, r.URL.Path)
		}
		got = nil
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		answer(w)
	}))
	defer srv.Close()
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://" + strings.TrimPrefix(srv.URL, "http://")))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	n := PodmanNetwork{Name: "sbx-web-egress", Driver: "bridge", Internal: true, Subnets: []PodmanSubnet{{Subnet: "10.213.0.0/28"}}}
	if err := CreatePodmanNetwork(context.Background(), cli, n); err != nil {
		t.Fatal(err)
	}
	if got["dns_enabled"] != false || got["internal"] != true || got["name"] != "sbx-web-egress" {
		t.Errorf("request %v, want an internal network without DNS", got)
	}
	for _, tc := range []struct {
		status int
		msg    string
		is     func(error) bool
	}{
		{http.StatusConflict, "network name sbx-web-egress already used: network already exists", cerrdefs.IsConflict},
		{http.StatusInternalServerError, "subnet 10.213.0.0/28 is already used on the host or by another config", func(err error) bool { return errors.Is(err, ErrSubnetUsed) }},
	} {
		answer = func(w http.ResponseWriter) {
			w.WriteHeader(tc.status)
			_ = json.NewEncoder(w).Encode(map[string]string{"message": tc.msg})
		}
		if err := CreatePodmanNetwork(context.Background(), cli, n); err == nil || !tc.is(err) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("answered %d %q: %v", tc.status, tc.msg, err)
		}
	}
}
