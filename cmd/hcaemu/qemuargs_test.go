package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestQemuArgs: hcaemu qemu-args prints the same QEMU arguments for both
// device models (vmxnet3 at function 0, the vfio-user-pci HCA at function
// 1) and names the serve command of the model chosen; a bad flag is a
// one-line error and exit 2.
func TestQemuArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string // in stdout, or in stderr when code != 0
	}{
		{"pvrdma", []string{"--socket-path", "/tmp/h.sock"}, 0,
			[]string{`Start "hcaemu serve --socket-path /tmp/h.sock" first`, "vmw_pvrdma", "vmxnet3,netdev=net0,addr=0x4.0,multifunction=on", `"driver":"vfio-user-pci"`, `"addr":"0x4.1"`}},
		{"mlx5", []string{"--socket-path", "/tmp/h.sock", "--device", "mlx5", "--slot", "5"}, 0,
			[]string{`Start "hcaemu serve --device mlx5 --socket-path /tmp/h.sock" first`, "15b3:1013", "mlx5_core", `"addr":"0x5.1"`}},
		{"unknown model", []string{"--socket-path", "/tmp/h.sock", "--device", "cx7"}, 2, []string{"--device"}},
		{"both models", []string{"--socket-path", "/tmp/h.sock", "--device", "pvrdma,mlx5"}, 2, []string{"--device pvrdma,mlx5: one function per socket"}},
		{"no socket", []string{"--device", "mlx5"}, 2, []string{"--socket-path is required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := qemuArgsWith(tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tc.code, stderr.String())
			}
			got := stdout.String()
			if code != 0 {
				got = stderr.String()
				if n := strings.Count(got, "\n"); n != 1 {
					t.Errorf("error of %d lines: %q", n, got)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
		})
	}
}
