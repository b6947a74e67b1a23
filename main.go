package main

import (
	"os"

	"github.com/sbx-sandbox/sbx/cmd"
)

func main() { os.Exit(cmd.Main()) }
