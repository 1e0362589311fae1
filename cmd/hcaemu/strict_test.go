package main

import (
	"flag"
	"io"
	"testing"

	"github.com/hcaemu/hcaemu/emu/hca"
)

// TestStrictLatch: the first finding is kept and stops the process once;
// later ones change nothing.
func TestStrictLatch(t *testing.T) {
	stops := 0
	l := &strictLatch{stop: func() { stops++ }}
	if _, ok := l.finding(); ok {
		t.Fatal("a finding before any report")
	}
	first := hca.Finding{Device: "hca0", Kind: hca.FindingWQE, Text: "qp 5 sq[7] pvrdma_sq_wqe_hdr.num_sge=9 > max_send_sge=4: completed with LOC_LEN_ERR"}
	l.report(first)
	l.report(hca.Finding{Device: "hca1", Kind: hca.FindingDoorbell, Text: "later"})
	if f, ok := l.finding(); !ok || f != first {
		t.Errorf("finding %v, %v; want %v", f, ok, first)
	}
	if stops != 1 {
		t.Errorf("stopped %d times, want 1", stops)
	}
	if got := first.String(); got != "hca0: wqe: "+first.Text {
		t.Errorf("String() = %q", got)
	}
}

func TestStrictFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want hca.StrictMode
		ok   bool
	}{
		{nil, hca.StrictWarn, true},
		{[]string{"--strict", "fail"}, hca.StrictFail, true},
		{[]string{"--strict=off"}, hca.StrictOff, true},
		{[]string{"--strict", "loud"}, 0, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := registerStrictFlag(fs)
		err := fs.Parse(c.args)
		if (err == nil) != c.ok || (c.ok && f.mode != c.want) {
			t.Errorf("%v: mode %v, err %v", c.args, f.mode, err)
		}
	}
}
