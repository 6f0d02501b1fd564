package startup

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/config"
)

func TestTracing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens here now
	tests := map[string]struct {
		cfg        config.Tracing
		wantRecord bool
		wantWarn   string // in the log; "" for no warning at all
	}{
		"disabled":       {},
		"bad endpoint":   {cfg: config.Tracing{Endpoint: "http://collector:4317"}, wantWarn: "tracing disabled"},
		"dead collector": {cfg: config.Tracing{Endpoint: dead, Insecure: true}, wantRecord: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			tracer, stop := Tracing(context.Background(), tc.cfg, "lpu-test", "v0", log)
			_, span := tracer.Start(context.Background(), "probe")
			if span.IsRecording() != tc.wantRecord {
				t.Errorf("span recording = %v, want %v", span.IsRecording(), tc.wantRecord)
			}
			span.End()
			began := time.Now()
			stop()
			if took := time.Since(began); took > TracingFlushTimeout+time.Second {
				t.Errorf("stop took %v, want about %v at most", took, TracingFlushTimeout)
			}
			if tc.wantWarn != "" && !strings.Contains(logs.String(), tc.wantWarn) {
				t.Errorf("log lacks %q:\n%s", tc.wantWarn, logs.String())
			}
			if tc.cfg.Endpoint == "" && strings.Contains(logs.String(), "level=WARN") {
				t.Errorf("warnings with tracing off:\n%s", logs.String())
			}
		})
	}
}
