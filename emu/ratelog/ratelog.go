// Package ratelog bounds the log lines a guest can make a device write.
//
// Much of what a device logs is triggered by the guest (a register written
// with the wrong width, a failed command, a bad producer index), so a guest
// that repeats the mistake in a loop would otherwise fill the host's log and
// spend the device's time formatting lines, sometimes under the device's
// lock. A Handler passes the first Burst lines of each message per Interval
// and counts the rest; the first line passed after a suppression carries the
// count as the attribute "suppressed".
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults: a guest repeating one mistake gets Burst lines every Interval.
const (
	DefaultBurst    = 10
	DefaultInterval = 10 * time.Second
	// maxMessages bounds the per-message table; messages are the code's
	// constant strings, so this is only a backstop.
	maxMessages = 1024
)

// Handler rate-limits records per message before passing them to the next
// handler. Handlers derived with WithAttrs and WithGroup share the limits.
type Handler struct {
	next  slog.Handler
	state *state
}

type state struct {
	burst    int
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	msgs map[string]*window
}

type window struct {
	start      time.Time
	passed     int
	suppressed int
}

// Options configures a Handler; the zero value uses the defaults.
type Options struct {
	Burst    int
	Interval time.Duration
	Now      func() time.Time // tests
}

// New wraps next.
func New(next slog.Handler, opts Options) *Handler {
	st := &state{burst: opts.Burst, interval: opts.Interval, now: opts.Now, msgs: map[string]*window{}}
	if st.burst <= 0 {
		st.burst = DefaultBurst
	}
	if st.interval <= 0 {
		st.interval = DefaultInterval
	}
	if st.now == nil {
		st.now = time.Now
	}
	return &Handler{next: next, state: st}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle implements slog.Handler: it passes the record, with the count of
// the lines suppressed before it, or counts it.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	suppressed, pass := h.state.admit(r.Message)
	if !pass {
		return nil
	}
	if suppressed > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", suppressed))
	}
	return h.next.Handle(ctx, r)
}

func (s *state) admit(msg string) (suppressed int, pass bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.msgs[msg]
	if w == nil {
		if len(s.msgs) >= maxMessages {
			clear(s.msgs)
		}
		w = &window{start: now}
		s.msgs[msg] = w
	}
	if now.Sub(w.start) >= s.interval {
		w.start, w.passed = now, 0
	}
	if w.passed >= s.burst {
		w.suppressed++
		return 0, false
	}
	w.passed++
	suppressed, w.suppressed = w.suppressed, 0
	return suppressed, true
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), state: h.state}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), state: h.state}
}

// Device is the logger of a device model named name ("" for none): log
// (nil: slog.Default) bounded per message with the default limits, every
// line carrying dev=name.
func Device(log *slog.Logger, name string) *slog.Logger {
	if log == nil {
		log = slog.Default()
	}
	log = slog.New(New(log.Handler(), Options{}))
	if name != "" {
		log = log.With("dev", name)
	}
	return log
}
