package procs

import (
	"os"
	"runtime"
	"testing"
)

func TestOneThenAll(t *testing.T) {
	before := runtime.GOMAXPROCS(2) // two at least, whatever the machine, so each step shows
	t.Cleanup(func() { runtime.GOMAXPROCS(before); all = 0 })
	t.Setenv("GOMAXPROCS", "2")
	One()
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Fatalf("with GOMAXPROCS set, One changed the Ps from 2 to %d", got)
	}
	if err := os.Unsetenv("GOMAXPROCS"); err != nil { // t.Setenv restores it
		t.Fatal(err)
	}
	One()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("One left %d Ps", got)
	}
	All()
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Fatalf("All gave back %d Ps, want 2", got)
	}
}
