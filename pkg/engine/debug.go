package engine

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// debugTracer turns the client's per-request trace spans into one log line per API call;
// the client offers no other hook into its transport.
type debugProvider struct {
	noop.TracerProvider
	tracer *debugTracer
}

type debugTracer struct {
	noop.Tracer
	mu  sync.Mutex
	out io.Writer
}

func newDebugTracer(out io.Writer) *debugProvider {
	return &debugProvider{tracer: &debugTracer{out: out}}
}

func (p *debugProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return p.tracer }

func (d *debugTracer) Start(ctx context.Context, name string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	s := &debugSpan{tracer: d, name: name, start: time.Now()}
	return trace.ContextWithSpan(ctx, s), s
}

type debugSpan struct {
	noop.Span
	tracer *debugTracer
	name   string
	start  time.Time
	status int64
	err    string
}

func (s *debugSpan) SetAttributes(kv ...attribute.KeyValue) {
	for _, a := range kv {
		if a.Key == "http.response.status_code" || a.Key == "http.status_code" {
			s.status = a.Value.AsInt64()
		}
	}
}

func (s *debugSpan) SetStatus(code codes.Code, description string) {
	if code == codes.Error && description != "" {
		s.err = description
	}
}

func (s *debugSpan) RecordError(err error, _ ...trace.EventOption) { s.err = err.Error() }

func (s *debugSpan) End(...trace.SpanEndOption) {
	s.tracer.mu.Lock()
	defer s.tracer.mu.Unlock()
	line := fmt.Sprintf("docker api: %s -> %d (%s)", s.name, s.status, time.Since(s.start).Round(100*time.Microsecond))
	if s.err != "" {
		line += ": " + s.err
	}
	fmt.Fprintln(s.tracer.out, line)
}
