package sandbox_test

import (
	"io"
	"os"
)

// ioPipe returns a stdin that stays open until the writer is closed.
func ioPipe() (io.Reader, io.WriteCloser) {
	r, w, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	return r, w
}
