package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fault"
)

// keepOpen is the guest's view of the port: closing the device leaves the
// byte stream (QEMU's chardev connection) open for the next command.
type keepOpen struct{ net.Conn }

func (keepOpen) Close() error { return nil }

// TestCommand runs hcaemu-faults against the host's guest control socket
// over one byte stream shared by all commands, as a guest's port is, with
// stale replies and half lines left on it between commands.
func TestCommand(t *testing.T) {
	seed := uint64(7)
	inj, err := fault.NewInjector(&fault.Plan{}, fault.Options{Seed: &seed})
	if err != nil {
		t.Fatal(err)
	}
	defer inj.Close()
	dir := t.TempDir()
	ctl := fault.NewControl(inj)
	defer ctl.Close()
	// The guest's socket, served as hcaemu run serves it.
	guestSock := filepath.Join(dir, "g0.faults")
	l, err := net.Listen("unix", guestSock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			ctl.ServeGuest(c)
		}
	}()
	conn, err := net.Dial("unix", guestSock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	open := func(path string, deadline time.Time) (io.ReadWriteCloser, error) { return keepOpen{conn}, nil }

	ruleFile := filepath.Join(dir, "rule.json")
	writeFile(t, ruleFile, "{\n  \"name\": \"from-file\",\n  \"action\": {\"kind\": \"duplicate\"}\n}\n")
	for _, tc := range []struct {
		before string // left on the stream before the command
		args   []string
		code   int
		out    string // substring of stdout, or of stderr when code != 0
	}{
		{"", []string{"add", `{"name":"drop-all","action":{"kind":"drop"}}`}, 0, "add: drop-all\n"},
		{"", []string{"add", `{"name":"drop-all","action":{"kind":"drop"}}`}, 1, "exists"},
		{"", []string{"add", "@" + ruleFile}, 0, "add: from-file\n"},
		{"", []string{"add", "not json"}, 2, "not JSON"},
		{"", []string{"add"}, 2, "one rule"},
		{`{"op":"list","id":"stale"}` + "\n", []string{"disable", "drop-all"}, 0, "disable: drop-all\n"},
		{`{"op":"sta`, []string{"enable", "drop-all"}, 0, "enable: drop-all\n"},
		{"", []string{"list"}, 0, `"name": "drop-all"`},
		{"", []string{"stats"}, 0, `"seed": 7`},
		{"", []string{"rm", "ghost"}, 1, "no such rule"},
		{"", []string{"rm", "from-file"}, 0, "rm: from-file\n"},
		{"", []string{"stats", "x"}, 2, "takes no operand"},
		{"", []string{"frobnicate"}, 2, "unknown command"},
		{"", nil, 2, "no command"},
		{"", []string{"-h"}, 0, "hcaemu faults --control SOCK"},
	} {
		if tc.before != "" {
			if _, err := conn.Write([]byte(tc.before)); err != nil {
				t.Fatal(err)
			}
		}
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr, open)
		got := stdout.String()
		if tc.code != 0 {
			got = stderr.String()
		}
		if code != tc.code || !strings.Contains(got, tc.out) {
			t.Errorf("hcaemu-faults %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, stdout.String(), stderr.String(), tc.code, tc.out)
		}
	}

	// list prints what "hcaemu faults list" prints: the rules, indented.
	rsp := inj.Do(fault.Request{Op: "list"}) // as the host's control socket answers it
	want, _ := json.MarshalIndent(rsp.Rules, "", "  ")
	var stdout bytes.Buffer
	if code := run([]string{"list"}, &stdout, io.Discard, open); code != 0 || stdout.String() != string(want)+"\n" {
		t.Errorf("list printed %q, want %q", stdout.String(), want)
	}
	if len(rsp.Rules) != 1 || rsp.Rules[0].Name != "drop-all" || !rsp.Rules[0].Armed {
		t.Errorf("rules after the commands: %+v", rsp.Rules)
	}
}

// TestCommandSilentPort: a port nobody answers on fails at the timeout.
func TestCommandSilentPort(t *testing.T) {
	guest, host := net.Pipe()
	defer host.Close()
	open := func(string, time.Time) (io.ReadWriteCloser, error) { return guest, nil }
	var stderr bytes.Buffer
	if code := run([]string{"--timeout", "50ms", "stats"}, io.Discard, &stderr, open); code != 1 || !strings.Contains(stderr.String(), "no reply within 50ms") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
