package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/qemu"
)

// TestFaultsCommand drives "hcaemu faults" against the control socket the
// run and serve flags start, and checks replay and check on files.
func TestFaultsCommand(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(plan, []byte(`{"seed":9,"rules":[{"name":"loss","action":{"kind":"drop"},"schedule":{"probability":0.5}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "ctl.sock")
	flags := faultFlags{plan: plan, log: filepath.Join(dir, "faults.log"), control: sock}
	var msg bytes.Buffer
	setup, err := flags.start(&msg, "")
	if err != nil {
		t.Fatal(err)
	}
	defer setup.close()
	if want := "seed 9, 1 rules, control socket " + sock; !strings.Contains(msg.String(), want) {
		t.Errorf("start printed %q, want %q", msg.String(), want)
	}
	run := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := faultsMain(args, &out, &errOut)
		return out.String(), errOut.String(), code
	}
	for _, tc := range []struct {
		args []string
		code int
		out  string // substring of stdout, or of stderr when code != 0
	}{
		{[]string{"--control", sock, "add", `{"name":"dup","action":{"kind":"duplicate"}}`}, 0, "add: dup"},
		{[]string{"--control", sock, "add", `{"name":"dup","action":{"kind":"duplicate"}}`}, 1, "exists"},
		{[]string{"--control", sock, "add", `{"action":{"kind":"drop"},"schedule":{"probability":-1}}`}, 1, "schedule.probability"},
		{[]string{"--control", sock, "add", `not json`}, 2, "not JSON"},
		{[]string{"--control", sock, "disable", "loss"}, 0, "disable: loss"},
		{[]string{"--control", sock, "list"}, 0, `"name": "dup"`},
		{[]string{"--control", sock, "stats"}, 0, `"seed": 9`},
		{[]string{"--control", sock, "rm", "ghost"}, 1, "no such rule"},
		{[]string{"--control", sock, "rm", "dup"}, 0, "rm: dup"},
		{[]string{"--control", sock, "clear"}, 0, ""},
		{[]string{"list"}, 2, "needs --control"},
		{[]string{"--control", sock, "frobnicate"}, 2, "unknown command"},
		{[]string{"check", plan}, 0, "1 rules"},
		{[]string{"replay", flags.log}, 0, `"seed": 9`},
	} {
		out, errOut, code := run(tc.args...)
		got := out
		if tc.code != 0 {
			got = errOut
		}
		if code != tc.code || !strings.Contains(got, tc.out) {
			t.Errorf("hcaemu faults %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.out)
		}
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"rules":[{"name":"x","action":{"kind":"drop"},"schedule":{"probability":7}}]}`), 0o644)
	if _, errOut, code := run("check", bad); code != 1 || !strings.Contains(errOut, `rule 0 "x": field schedule.probability`) {
		t.Errorf("check of a bad plan: exit %d, %q", code, errOut)
	}
	if _, err := (&faultFlags{plan: bad}).start(&msg, ""); err == nil || !strings.Contains(err.Error(), "--faults") {
		t.Errorf("a bad plan started: %v", err)
	}
}

// TestFaultsGuestPorts: "hcaemu run" serves each guest's fault-control
// port on the cluster's socket for it, with the commands of the control
// socket; "hcaemu serve --guest-control" needs --control.
func TestFaultsGuestPorts(t *testing.T) {
	dir := t.TempDir()
	flags := faultFlags{control: filepath.Join(dir, "ctl.sock")}
	setup, err := flags.start(io.Discard, "")
	if err != nil {
		t.Fatal(err)
	}
	defer setup.close()
	cl := &qemu.Cluster{Dir: dir, Guests: 2}
	if err := setup.listenGuests(cl); err != nil {
		t.Fatal(err)
	}
	if !cl.FaultPorts {
		t.Error("the cluster's guests get no fault-control port")
	}
	for k := range 2 {
		conn, err := net.Dial("unix", cl.FaultsSocketPath(k))
		if err != nil {
			t.Fatalf("guest %d: %v", k, err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(time.Minute))
		if _, err := conn.Write([]byte(`{"op":"add","id":"g","rule":{"name":"g` + strconv.Itoa(k) + `","action":{"kind":"drop"}}}` + "\n")); err != nil {
			t.Fatal(err)
		}
		var rsp fault.Response
		if err := json.NewDecoder(conn).Decode(&rsp); err != nil || !rsp.OK || rsp.ID != "g" || rsp.Name != "g"+strconv.Itoa(k) {
			t.Errorf("guest %d: add answered %+v, %v", k, rsp, err)
		}
	}
	if rsp, err := controlCommand(flags.control, fault.Request{Op: "list"}); err != nil || len(rsp.Rules) != 2 {
		t.Errorf("the control socket lists %+v, %v; want the guests' two rules", rsp, err)
	}
	// Without a control socket (serve without fault flags) there is
	// nothing to serve.
	var none *faultSetup
	cl2 := &qemu.Cluster{Dir: dir, Guests: 1}
	if err := none.listenGuests(cl2); err != nil || cl2.FaultPorts {
		t.Errorf("no fault setup: %v, ports %v", err, cl2.FaultPorts)
	}

	if code := serveMain([]string{"--socket-path", filepath.Join(dir, "hca0.sock"), "--guest-control", filepath.Join(dir, "g.sock")}); code != 2 {
		t.Errorf("serve --guest-control without --control exited %d", code)
	}
}
