package proc

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/errs"
)

// The trailer is found however the stream is cut into writes, and all the output before it
// comes through unchanged, also when it is much longer than what is held back.
func TestTrailerWriterHoldsBackOnlyTheEnd(t *testing.T) {
	mk := newMarker()
	big := strings.Repeat("0123456789", 100000) + "\n$ "
	stream := big + mk + " rc=7 to=0 start=new end=-\n"
	for _, chunk := range []int{1, 7, 300, 4096, len(stream)} {
		var out bytes.Buffer
		w := &trailerWriter{w: &out, marker: []byte(mk)}
		for i := 0; i < len(stream); i += chunk {
			if _, err := w.Write([]byte(stream[i:min(i+chunk, len(stream))])); err != nil {
				t.Fatal(err)
			}
			if held := len(w.held); held > 2*(len(mk)+trailerRoom)+chunk {
				t.Fatalf("chunk %d: %d bytes held back", chunk, held)
			}
		}
		fields, ok := w.finish()
		if !ok || out.String() != big || fields["rc"] != "7" || fields["start"] != "new" {
			t.Errorf("chunk %d: ok %v fields %v, %d bytes out", chunk, ok, fields, out.Len())
		}
	}
}

func TestShellResultFromTrailer(t *testing.T) {
	res, err := shellResult("box", "s", map[string]string{"rc": "3", "to": "0", "start": "died:137", "end": "died:3"}, time.Minute, time.Second)
	if err != nil || res.ExitCode != 3 || res.Started != "replaced" || res.PrevExit != "137" || !res.ShellExited || res.TimedOut {
		t.Errorf("%+v %v", res, err)
	}
	if !strings.Contains(res.Notice("s"), "had ended (exit status 137)") {
		t.Errorf("notice %q", res.Notice("s"))
	}
	res, _ = shellResult("box", "s", map[string]string{"rc": "130", "to": "1", "start": "-", "end": "killed"}, time.Minute, time.Second)
	if !res.TimedOut || !res.ShellKilled || res.Started != "" || !strings.Contains(res.Notice("s"), "was killed") {
		t.Errorf("%+v", res)
	}
	_, err = shellResult("box", "s", map[string]string{"busy": "1"}, 2*time.Second, time.Second)
	var busy *ShellBusyError
	if !errors.As(err, &busy) || errs.ExitCode(err) != errs.CodeFailure || !strings.Contains(err.Error(), "more than 2s") || !strings.Contains(errs.Hint(err), "--wait") {
		t.Errorf("busy: %v", err)
	}
	if _, err := shellResult("box", "s", map[string]string{"err": "start"}, time.Minute, 0); err == nil || !strings.Contains(err.Error(), "could not start its shell") {
		t.Errorf("err=start: %v", err)
	}
	if _, err := shellResult("box", "s", map[string]string{"rc": ""}, time.Minute, 0); err == nil {
		t.Error("an empty status was accepted")
	}
}
