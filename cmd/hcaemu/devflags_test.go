package main

import "testing"

func TestMaxQPFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint32 // 0: refused
	}{
		{"2", 2}, {"1024", 1024}, {"65535", 65535},
		{"1", 0}, {"0", 0}, {"65536", 0}, {"-5", 0}, {"4k", 0}, {"", 0},
	} {
		var f maxQPFlag
		err := f.Set(tc.in)
		if (err == nil) != (tc.want != 0) || f.n != tc.want {
			t.Errorf("Set(%q): n %d, err %v; want %d", tc.in, f.n, err, tc.want)
		}
		if tc.want != 0 && f.caps().MaxQP != tc.want {
			t.Errorf("Set(%q): caps advertise %d", tc.in, f.caps().MaxQP)
		}
	}
	var unset *maxQPFlag
	if unset.caps() != nil || (&maxQPFlag{}).caps() != nil {
		t.Error("an unset --max-qp changes the capabilities")
	}
}

func TestCheckMTU(t *testing.T) {
	for mtu, ok := range map[int]bool{576: true, 1500: true, 9000: true, 575: false, 9001: false, 0: false, -1: false} {
		if err := checkMTU(mtu); (err == nil) != ok {
			t.Errorf("checkMTU(%d): %v", mtu, err)
		}
	}
}
