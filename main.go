package main

import (
	"os"

	"github.com/sbx-sandbox/sbx/cmd"
	_ "github.com/sbx-sandbox/sbx/internal/procs/onestart" // one P: see internal/procs
)

func main() { os.Exit(cmd.Main()) }
