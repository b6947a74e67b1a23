package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbx-sandbox/sbx/pkg/agent/agenttest"
)

// goConstants is every constant of type FrameType or Strict declared in agent.go, by name,
// with its value on the wire.
func goConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "agent.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			typ, ok := vs.Type.(*ast.Ident)
			if !ok || typ.Name != "FrameType" && typ.Name != "Strict" {
				continue
			}
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					t.Fatalf("%s: the test reads only literal values", name.Name)
				}
				v := lit.Value
				if lit.Kind == token.CHAR {
					if v, err = strconv.Unquote(v); err != nil {
						t.Fatal(err)
					}
				}
				consts[name.Name] = v
			}
		}
	}
	return consts
}

// The agent (agentd, and its shim) and the client share one set of constants, agent.go's:
// the agent spells no frame type as a literal of its own, and declares no frame type or
// strict mode. Each frame type is distinct and named in PROTOCOL.md.
func TestConstantsMatchAgent(t *testing.T) {
	goc := goConstants(t)
	if len(goc) == 0 {
		t.Fatal("found no constants in agent.go")
	}
	frames := map[string]string{}
	for name, v := range goc {
		if strings.HasPrefix(name, "Frame") {
			if other, dup := frames[v]; dup {
				t.Errorf("%s and %s are both %q", name, other, v)
			}
			frames[v] = name
		}
	}
	protocol, err := os.ReadFile("PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range goc {
		if !strings.Contains(string(protocol), "`"+name+"`") {
			t.Errorf("PROTOCOL.md does not name %s", name)
		}
	}
	files, _ := filepath.Glob("agentd/*.go")
	shims, _ := filepath.Glob("shim/*.go")
	files = append(files, shims...)
	if len(files) == 0 {
		t.Fatal("found no agent sources")
	}
	for _, file := range files {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if v, err := strconv.Unquote(n.Value); n.Kind == token.CHAR && err == nil && frames[v] != "" {
					t.Errorf("%s spells %s as %s: use agent.%s", file, frames[v], n.Value, frames[v])
				}
			case *ast.ValueSpec:
				if sel, ok := n.Type.(*ast.SelectorExpr); ok && (sel.Sel.Name == "FrameType" || sel.Sel.Name == "Strict") {
					t.Errorf("%s declares %s %s of its own", file, n.Names[0].Name, sel.Sel.Name)
				}
			}
			return true
		})
	}
}

func TestRequestEncode(t *testing.T) {
	req := Request{TTY: true, Rows: 24, Cols: 80, Strict: StrictExit, Timeout: 1500*time.Microsecond + time.Second,
		Grace: 5 * time.Second, Reap: true, Dir: "/w", Argv: []string{"sh", "-c", "x"}, Env: []string{"A=1"}}
	want := "1\x0024\x0080\x002\x001002\x005000\x001\x00/w\x003\x00sh\x00-c\x00x\x00A=1\x00"
	if got := string(req.Encode()); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got, want := string(Request{Argv: []string{"true"}}.Encode()), "0\x000\x000\x000\x000\x000\x000\x00\x001\x00true\x00"; got != want {
		t.Errorf("the zero request: got %q, want %q", got, want)
	}
}

// rawFrame is a frame header saying n bytes, followed by body (which may be shorter).
func rawFrame(typ FrameType, n int, body string) []byte {
	f := []byte{byte(typ), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(f[1:], uint32(n))
	return append(f, body...)
}

// refused sends frames on a new connection and returns the types of the frames the agent
// sent back before X, and X's text. X must come last: then the agent closes the connection.
func (a *hostAgent) refused(t *testing.T, frames ...[]byte) ([]FrameType, string) {
	t.Helper()
	c := a.dial(t)
	for _, f := range frames {
		if _, err := c.conn.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	// A deadline only so that an agent that never answers fails the test.
	_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var before []FrameType
	for {
		typ, body, err := c.next()
		if err != nil {
			t.Fatalf("want X, got %v after frames %q", err, before)
		}
		if typ == FrameRefused {
			why := string(body)
			if typ, _, err := c.next(); !errors.Is(err, io.EOF) {
				t.Errorf("want the connection closed after X, got frame %q, %v", typ, err)
			}
			return before, why
		}
		before = append(before, typ)
	}
}

// A frame the agent does not take is refused with X, saying why, and the connection is
// closed; it costs that connection, not the agent, which serves the next one.
func TestAgentRefusesBadFrames(t *testing.T) {
	a := startHostAgent(t, 0)
	req := string(command("true").Encode())
	huge := command("true")
	huge.TTY, huge.Rows, huge.Cols = true, 1<<16, 80
	hugeReq := string(huge.Encode())
	for _, tt := range []struct {
		name   string
		frames [][]byte
		before []FrameType // what the agent sends first
		want   string
	}{
		{"unknown type", [][]byte{rawFrame('Q', 0, "")}, nil, "unknown frame type b'Q'"},
		{"a type only the agent sends", [][]byte{rawFrame(FrameHello, 0, "")}, nil, "unknown frame type b'H'"},
		{"the hand-off's frame", [][]byte{rawFrame(FrameListener, 0, "")}, nil, "unknown frame type b'L'"},
		{"oversized, from its header", [][]byte{rawFrame(FrameStdin, MaxRequest+1, "")}, nil, "frame b'I' of 8388609 bytes, more than 8388608"},
		{"oversized request", [][]byte{rawFrame(FrameRequest, 64<<20, "")}, nil, "frame b'R' of 67108864 bytes, more than 8388608"},
		{"malformed request", [][]byte{rawFrame(FrameRequest, 14, "not\x00a\x00request\x00")}, nil, "malformed request"},
		{"a terminal larger than one can be", [][]byte{rawFrame(FrameRequest, len(hugeReq), hugeReq)}, nil, "malformed request"},
		{"a second request", [][]byte{rawFrame(FrameRequest, len(req), req), rawFrame(FrameRequest, len(req), req)},
			[]FrameType{FrameProcess}, "a second request on one connection"},
		{"a connect that is no port", [][]byte{rawFrame(FrameConnect, 5, "80 80")}, nil, "malformed request"},
		{"a connect to port 0", [][]byte{rawFrame(FrameConnect, 1, "0")}, nil, "malformed request"},
		{"a connect after a request", [][]byte{rawFrame(FrameRequest, len(req), req), rawFrame(FrameConnect, 5, "65535")},
			[]FrameType{FrameProcess}, "a second request on one connection"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before, why := a.refused(t, tt.frames...)
			if why != tt.want || !slices.Equal(before, tt.before) {
				t.Errorf("frames %q then X %q, want %q then X %q", before, why, tt.before, tt.want)
			}
			a.serves(t)
		})
	}
}

// A frame of MaxRequest bytes is taken whole.
func TestAgentTakesTheLargestFrame(t *testing.T) {
	a := startHostAgent(t, 0)
	c := a.start(t, command("wc", "-c"))
	if err := c.send(FrameStdin, make([]byte, MaxRequest)); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if r := finish(t, c); r.err != nil || r.code != 0 || strings.TrimSpace(r.stdout) != strconv.Itoa(MaxRequest) {
		t.Errorf("%+v", r)
	}
}

// W sets the size of the command's terminal, in order with its input; without a terminal
// it is ignored.
func TestAgentResize(t *testing.T) {
	a := startHostAgent(t, 0)
	req := command("sh", "-c", "stty size; echo ready; read -r _; stty size")
	req.TTY, req.Rows, req.Cols = true, 24, 80
	c := a.start(t, req)
	readUntil(t, c, "ready")
	c.Resize(50, 120)
	if _, err := c.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	r := finish(t, c)
	lines := strings.Fields(strings.ReplaceAll(r.stdout, "\r", ""))
	if r.err != nil || r.code != 0 || len(lines) < 2 || strings.Join(lines[len(lines)-2:], " ") != "50 120" {
		t.Errorf("after W 50 120: %+v", r)
	}

	c = a.start(t, command("cat"))
	c.Resize(10, 10)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if r := finish(t, c); r.err != nil || r.code != 0 || r.stdout != "x" {
		t.Errorf("W without a terminal: %+v", r)
	}
	a.serves(t)
}

// An exception in a handler (a W that does not parse raises one) drops the connection as a
// client that goes away does, after X saying so: the command's input ends (its terminal is
// hung up) and the agent ends the command, so it never waits forever. The agent logs the
// exception and serves the next connection.
func TestAgentHandlerException(t *testing.T) {
	a := startHostAgent(t, 0)
	const why = "a resize must be rows and cols in decimal"
	for _, tty := range []bool{false, true} {
		t.Run(map[bool]string{false: "pipes", true: "terminal"}[tty], func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "ended")
			// A terminal's hang-up sends HUP, the agent TERM: neither may end the shell before
			// it says so.
			req := command("sh", "-c", "trap 'touch "+mark+"; exit' HUP TERM; echo ready; cat >/dev/null; touch "+mark)
			req.TTY, req.Rows, req.Cols = tty, 24, 80
			c := a.start(t, req)
			readUntil(t, c, "ready")
			if err := c.send(FrameResize, []byte("bad")); err != nil {
				t.Fatal(err)
			}
			// A deadline only so that an agent that keeps the connection fails the test.
			_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			err := c.CopyOutput(io.Discard, io.Discard)
			if want := "protocol error: the agent dropped the command: internal error: " + why; err == nil || err.Error() != want {
				t.Errorf("got %v, want %q", err, want)
			}
			if typ, _, err := c.next(); !errors.Is(err, io.EOF) {
				t.Errorf("want the connection closed after X, got frame %q, %v", typ, err)
			}
			waitLog(t, a, "sbx-agent: "+why)
			agenttest.WaitFile(t, mark, "the command's input stayed open after the agent dropped its connection")
			a.serves(t)
		})
	}
}

// pipeClient is a client whose agent is the other end of a pipe, greeted.
func pipeClient(t *testing.T) (*Client, net.Conn) {
	t.Helper()
	clientSide, agentSide := net.Pipe()
	t.Cleanup(func() { clientSide.Close(); agentSide.Close() })
	go func() { _, _ = agentSide.Write(rawFrame(FrameHello, len(Version()), Version())) }()
	c := newClient(clientSide)
	if err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	return c, agentSide
}

// The client takes from the agent only the frames it knows, of at most maxFrame bytes:
// another type, a longer frame, an X (the agent gave up) or an unreadable P or Z is a
// protocol error saying so, and the caller drops the connection.
func TestClientRefusesBadFrames(t *testing.T) {
	for _, tt := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"unknown type", rawFrame('Q', 2, "hi"), `frame of unknown type 'Q'`},
		{"a second greeting", rawFrame(FrameHello, len(Version()), Version()), `frame of unknown type 'H'`},
		{"a frame it sends", rawFrame(FrameStdin, 1, "x"), `frame of unknown type 'I'`},
		{"oversized", rawFrame(FrameStdout, maxFrame+1, ""), "a frame of 1048577 bytes, more than 1048576"},
		{"the agent gave up", rawFrame(FrameRefused, 21, "internal error: \x1b[31m"), `the agent dropped the command: internal error: \x1b[31m`},
		{"unreadable process", rawFrame(FrameProcess, 5, "1 2 x"), `the agent sent the process "1 2 x"`},
		{"unreadable exit status", rawFrame(FrameExit, 3, "abc"), `exit status "abc"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, agentSide := pipeClient(t)
			go func() { _, _ = agentSide.Write(tt.frame) }()
			err := c.CopyOutput(io.Discard, io.Discard)
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want a protocol error saying %q", err, tt.want)
			}
		})
	}
}

// The client ends a command's stream when its output ends, without an exit code: the agent
// went away, as when its sandbox stops.
func TestClientAgentGone(t *testing.T) {
	c, agentSide := pipeClient(t)
	go func() {
		_, _ = agentSide.Write(rawFrame(FrameStdout, 3, "out"))
		agentSide.Close()
	}()
	var out bytes.Buffer
	if err := c.CopyOutput(&out, io.Discard); err != nil || out.String() != "out" {
		t.Fatalf("output %q, err %v", out.String(), err)
	}
	if code, ok := c.Exit(); ok {
		t.Errorf("an exit code %d from an agent that went away", code)
	}
}
