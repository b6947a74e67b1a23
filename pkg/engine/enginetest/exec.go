package enginetest

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
)

// Answer is what a faked exec writes and how it ends.
type Answer struct {
	Stdout, Stderr io.Reader // nil writes nothing
	Code           int
}

// AnswerExecs makes every exec on f answer with what answer returns for its command line (the
// whole of it, sbx's exec wrapper included): stdout, then stderr, in the engine's multiplexed
// framing, then the exit code. Output is streamed as the reader gives it and never held, so a
// test can send far more than it could keep; the exec's stdin is read and dropped.
func (f *FakeEngine) AnswerExecs(answer func(cmd []string) Answer) {
	var mu sync.Mutex
	cmds, codes := map[string][]string{}, map[string]int{}
	f.ContainerExecCreateFn = func(_ context.Context, _ string, o container.ExecOptions) (container.ExecCreateResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		id := fmt.Sprintf("exec%d", len(cmds)+1)
		cmds[id] = o.Cmd
		return container.ExecCreateResponse{ID: id}, nil
	}
	f.ContainerExecAttachFn = func(_ context.Context, id string, _ container.ExecAttachOptions) (types.HijackedResponse, error) {
		mu.Lock()
		cmd := cmds[id]
		mu.Unlock()
		a := answer(cmd)
		mu.Lock()
		codes[id] = a.Code
		mu.Unlock()
		client, server := net.Pipe()
		go func() { _, _ = io.Copy(io.Discard, server) }()
		go func() {
			defer server.Close()
			if writeFrames(server, 1, a.Stdout) == nil {
				_ = writeFrames(server, 2, a.Stderr)
			}
		}()
		return types.NewHijackedResponse(client, ""), nil
	}
	f.ContainerExecInspectFn = func(_ context.Context, id string) (container.ExecInspect, error) {
		mu.Lock()
		defer mu.Unlock()
		return container.ExecInspect{ExecID: id, ExitCode: codes[id]}, nil
	}
}

// writeFrames copies r to w as frames of stream (1 stdout, 2 stderr), reusing one buffer.
func writeFrames(w io.Writer, stream byte, r io.Reader) error {
	if r == nil {
		return nil
	}
	buf := make([]byte, 8+32<<10)
	buf[0] = stream
	for {
		n, err := r.Read(buf[8:])
		if n > 0 {
			binary.BigEndian.PutUint32(buf[4:8], uint32(n))
			if _, werr := w.Write(buf[:8+n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Repeat is n bytes of b, made as they are read.
func Repeat(b byte, n int64) io.Reader { return io.LimitReader(repeatReader(b), n) }

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// Allocated reports how many bytes the heap allocated while f ran, to check that sbx did
// not hold what a fake sent.
func Allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
