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
		if f.value() != tc.want {
			t.Errorf("Set(%q): the HCAs get %d", tc.in, f.value())
		}
	}
	var unset *maxQPFlag
	if unset.value() != 0 || (&maxQPFlag{}).value() != 0 {
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
