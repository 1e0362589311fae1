package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
