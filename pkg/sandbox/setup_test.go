package sandbox_test

import (
	"fmt"
	"testing"

	"github.com/sbx-sandbox/sbx/pkg/config"
	"github.com/sbx-sandbox/sbx/pkg/sandbox"
)

func TestSetupEgress(t *testing.T) {
	cfg := config.Defaults()
	cfg.Egress = []string{"github.com", "@python"}
	cfg.Setup = config.Setup{Apt: []string{"bc"}, Pip: []string{"requests"}, Run: []string{"true"}}
	if got := fmt.Sprint(sandbox.SetupEgress(cfg)); got != "[github.com @python @debian]" {
		t.Errorf("SetupEgress = %s", got)
	}
	cfg.Egress, cfg.Setup = nil, config.Setup{Run: []string{"true"}}
	if got := sandbox.SetupEgress(cfg); len(got) != 0 {
		t.Errorf("commands alone get %v", got)
	}
}

// A setup's sandbox runs the derived image with the hardening of any other, and a changed
// setup changes the config hash, so the sandbox is made again; no setup leaves the hash alone.
func TestSpecWithSetup(t *testing.T) {
	plain := specInput()
	base, err := sandbox.BuildSpec(plain)
	if err != nil {
		t.Fatal(err)
	}
	in := specInput()
	in.Config.Setup = config.Setup{Apt: []string{"bc"}}
	in.RunImage = "sbx-derived:0123"
	spec, err := sandbox.BuildSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Container.Image != "sbx-derived:0123" || !spec.Host.ReadonlyRootfs || fmt.Sprint(spec.Host.CapDrop) != "[ALL]" ||
		spec.Host.NetworkMode != base.Host.NetworkMode || fmt.Sprint(spec.Host.SecurityOpt) != fmt.Sprint(base.Host.SecurityOpt) || spec.Container.User != base.Container.User {
		t.Errorf("spec %+v %+v", spec.Container, spec.Host)
	}
	if spec.Hash == base.Hash {
		t.Error("setup does not change the config hash")
	}
	in.Config.Setup.Apt = []string{"dc"}
	if other, _ := sandbox.BuildSpec(in); other.Hash == spec.Hash {
		t.Error("a changed setup keeps the config hash")
	}
	plain.Config.Setup = config.Setup{Apt: []string{}, Npm: []string{}, Pip: []string{}, Run: []string{}}
	if again, _ := sandbox.BuildSpec(plain); again.Hash != base.Hash {
		t.Error("an empty setup changes the config hash")
	}
}
