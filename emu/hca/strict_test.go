package hca

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Strict counts every finding whatever the mode, latches at StrictFail's
// first only (fatal and Report once, in that order), and logs at the
// mode's level.
func TestStrictRecord(t *testing.T) {
	for _, tc := range []struct {
		mode             StrictMode
		wantFatal        int
		wantLatched      bool
		wantLog, notLogs string
	}{
		{StrictOff, 0, false, "level=DEBUG", "level=WARN"},
		{StrictWarn, 0, false, "level=WARN", "level=ERROR"},
		{StrictFail, 1, true, "level=ERROR", ""},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			var order []string
			s := Strict{Mode: tc.mode, Report: func(f Finding) { order = append(order, "report:"+f.Text) }}
			fatal := func() { order = append(order, "fatal") }
			s.Record(log, Finding{Device: "hca0", Kind: FindingWQE, Text: "first"}, fatal)
			s.Record(log, Finding{Device: "hca0", Kind: FindingWQE, Text: "second"}, fatal)
			s.Record(log, Finding{Device: "hca0", Kind: FindingHandle, Text: "third"}, fatal)
			s.Record(log, Finding{Device: "hca0", Kind: NumFindingKinds + 3, Text: "unknown kind"}, fatal)
			counts := s.Counts()
			if counts[FindingWQE] != 2 || counts[FindingHandle] != 1 {
				t.Errorf("counts %v", counts)
			}
			if s.Latched() != tc.wantLatched {
				t.Errorf("latched %v", s.Latched())
			}
			if tc.wantFatal == 1 {
				if strings.Join(order, ",") != "fatal,report:first" {
					t.Errorf("fatal and report: %v", order)
				}
			} else if len(order) != 0 {
				t.Errorf("fatal and report under %s: %v", tc.mode, order)
			}
			if !strings.Contains(buf.String(), tc.wantLog) || (tc.notLogs != "" && strings.Contains(buf.String(), tc.notLogs)) {
				t.Errorf("log under %s:\n%s", tc.mode, buf.String())
			}
		})
	}
}
