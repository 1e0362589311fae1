package ratelog

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// clock is a hand-driven time source.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestBurstThenSuppressedCount(t *testing.T) {
	var out bytes.Buffer
	clk := &clock{t: time.Unix(0, 0)}
	log := slog.New(New(slog.NewTextHandler(&out, nil), Options{Burst: 3, Interval: time.Second, Now: clk.now})).With("dev", "hca0")
	for i := range 100000 {
		log.Warn("odd-width register write", "i", i)
	}
	log.Warn("another message") // its own budget
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 3 of the first message and 1 of the second:\n%s", len(lines), out.String())
	}
	clk.t = clk.t.Add(time.Second)
	out.Reset()
	log.Warn("odd-width register write", "i", -1)
	got := out.String()
	if !strings.Contains(got, "suppressed=99997") || !strings.Contains(got, "dev=hca0") {
		t.Fatalf("first line of the next interval = %q, want the count of the 99997 suppressed and the device", got)
	}
}

func TestMessageTableBounded(t *testing.T) {
	h := New(slog.DiscardHandler, Options{})
	log := slog.New(h)
	for i := range 10 * maxMessages {
		log.Warn(fmt.Sprint("message ", i))
	}
	if n := len(h.state.msgs); n > maxMessages {
		t.Fatalf("%d messages tracked, bound %d", n, maxMessages)
	}
}

// TestDevice: a device's logger names it and is bounded per message.
func TestDevice(t *testing.T) {
	var buf bytes.Buffer
	log := Device(slog.New(slog.NewTextHandler(&buf, nil)), "hca0")
	for range DefaultBurst + 5 {
		log.Info("same mistake")
	}
	if n := strings.Count(buf.String(), "dev=hca0"); n != DefaultBurst {
		t.Errorf("%d lines with dev=hca0, want %d:\n%s", n, DefaultBurst, buf.String())
	}
	if Device(nil, "") == nil {
		t.Error("Device(nil, \"\") is nil")
	}
}
