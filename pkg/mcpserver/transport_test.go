package mcpserver

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// eofSignal closes eof when its reader has ended.
type eofSignal struct {
	r    io.Reader
	eof  chan struct{}
	once sync.Once
}

func (e *eofSignal) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.once.Do(func() { close(e.eof) })
	}
	return n, err
}

// A call that can only be answered after the input has ended is answered, and then the
// server ends.
func TestStdioTransportAnswersAfterEOF(t *testing.T) {
	eof := make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "late"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, struct{}, error) {
		<-eof
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "after the end"}}}, struct{}{}, nil
	})
	in := &eofSignal{r: strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"late","arguments":{}}}
`), eof: eof}
	var out bytes.Buffer
	if err := srv.Run(context.Background(), StdioTransport(in, &out)); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], `{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"after the end"}]`) {
		t.Errorf("answers:\n%s", out.String())
	}
}
