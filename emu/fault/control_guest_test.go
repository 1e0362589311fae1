package fault_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hcaemu/hcaemu/emu/fault"
)

// guestPort is the host end of a guest's virtio-serial port as QEMU's
// chardev sees it: a connection to the guest socket.
type guestPort struct {
	conn net.Conn
	rd   *bufio.Reader
}

func dialGuest(t *testing.T, path string) *guestPort {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &guestPort{conn: conn, rd: bufio.NewReader(conn)}
}

func (g *guestPort) write(t *testing.T, text string) {
	t.Helper()
	g.conn.SetWriteDeadline(time.Now().Add(time.Minute))
	if _, err := g.conn.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
}

func (g *guestPort) reply(t *testing.T) fault.Response {
	t.Helper()
	g.conn.SetReadDeadline(time.Now().Add(time.Minute))
	line, err := g.rd.ReadBytes('\n')
	if err != nil {
		t.Fatalf("reading a reply: %v", err)
	}
	var rsp fault.Response
	if err := json.Unmarshal(line, &rsp); err != nil {
		t.Fatalf("reply %q: %v", line, err)
	}
	return rsp
}

// TestControlGuest: a guest's socket answers every line, keeps the
// connection after garbage and overlong lines, echoes request ids, and a
// guest that never reads its replies delays neither another guest nor the
// control socket.
func TestControlGuest(t *testing.T) {
	checkGoroutines(t)
	n := newNet(t, `{"rules":[{"name":"base","action":{"kind":"duplicate"},"schedule":{"disarmed":true}}]}`, 1)
	dir := t.TempDir()
	path := filepath.Join(dir, "faults.sock")
	ctl, err := listenControl(path, n.inj)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	for _, g := range []string{"g0.faults", "g1.faults"} {
		if err := ctl.ListenGuest(filepath.Join(dir, g)); err != nil {
			t.Fatal(err)
		}
	}

	g0 := dialGuest(t, filepath.Join(dir, "g0.faults"))
	// reply is what a reply must say: ok, its id, and a part of its error.
	type reply struct {
		ok      bool
		id, err string
	}
	longID := strings.Repeat("y", fault.MaxGuestLine-len(`{"op":"clear","id":""}`))
	for _, tc := range []struct {
		name    string
		send    string // written as is (several lines or a partial one)
		replies []reply
	}{
		{"add with an id", `{"op":"add","id":"a1","rule":{"name":"cut","action":{"kind":"drop"}}}` + "\n", []reply{{true, "a1", ""}}},
		{"garbage then a command", "\x00\xffgarbage\n{\"op\":\"enable\",\"name\":\"base\",\"id\":\"e\"}\n",
			[]reply{{false, "", "bad command"}, {true, "e", ""}}},
		{"empty lines are skipped", "\n\n  \n" + `{"op":"disable","name":"base"}` + "\n", []reply{{true, "", ""}}},
		{"an error keeps the id", `{"op":"rm","name":"ghost","id":"r"}` + "\n", []reply{{false, "r", "no such rule"}}},
		{"unknown field", `{"op":"list","id":"u","color":1}` + "\n", []reply{{false, "", "color"}}},
		{"overlong line", strings.Repeat("x", fault.MaxGuestLine+1) + "\n" + `{"op":"rm","name":"cut","id":"after"}` + "\n",
			[]reply{{false, "", "longer than 65536 bytes"}, {true, "after", ""}}},
		{"longest line accepted", `{"op":"clear","id":"` + longID + `"}` + "\n", []reply{{true, longID, ""}}},
	} {
		g0.write(t, tc.send)
		for _, want := range tc.replies {
			rsp := g0.reply(t)
			if rsp.OK != want.ok || rsp.ID != want.id || !strings.Contains(rsp.Error, want.err) || want.ok != (rsp.Error == "") {
				t.Errorf("%s: reply %+v, want ok %v, id %q, error with %q", tc.name, rsp, want.ok, want.id, want.err)
			}
		}
	}
	if rsp, err := command(path, fault.Request{Op: "list"}); err != nil || len(rsp.Rules) != 0 {
		t.Errorf("after the guest's clear: %+v, %v", rsp, err)
	}

	// A guest grows the plan up to MaxGuestRules rules, not beyond; the
	// control socket can.
	var adds strings.Builder
	for i := range fault.MaxGuestRules + 1 {
		fmt.Fprintf(&adds, `{"op":"add","id":"%d","rule":{"name":"r%d","match":{"qpn":%d},"action":{"kind":"drop"}}}`+"\n", i, i, i+1)
	}
	// Written while the replies are read: neither side's buffer has to
	// hold all of it.
	wrote := make(chan error, 1)
	go func() {
		_, err := g0.conn.Write([]byte(adds.String()))
		wrote <- err
	}()
	defer func() {
		if err := <-wrote; err != nil {
			t.Error(err)
		}
	}()
	for i := range fault.MaxGuestRules + 1 {
		rsp := g0.reply(t)
		if want := i < fault.MaxGuestRules; rsp.OK != want || rsp.ID != strconv.Itoa(i) || !want && !strings.Contains(rsp.Error, "up to 1024") {
			t.Fatalf("guest add %d: %+v, want ok %v", i, rsp, want)
		}
	}
	if rsp, err := command(path, fault.Request{Op: "add", Rule: []byte(`{"name":"host","action":{"kind":"drop"}}`)}); err != nil || !rsp.OK {
		t.Errorf("the control socket's add beyond the guests' bound: %+v, %v", rsp, err)
	}
	g0.write(t, `{"op":"clear"}`+"\n")
	if rsp := g0.reply(t); !rsp.OK {
		t.Errorf("clear: %+v", rsp)
	}

	// Guest 1 writes commands and never reads: its replies back up until
	// its writes block. Guest 0 and the control socket are still answered.
	g1 := dialGuest(t, filepath.Join(dir, "g1.faults"))
	flood := strings.Repeat(`{"op":"list"}`+"\n", 1<<10)
	g1.conn.SetWriteDeadline(time.Now().Add(time.Minute))
	blocked := false
	for range 1 << 12 {
		if _, err := g1.conn.Write([]byte(flood)); err != nil {
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				t.Fatal(err)
			}
			blocked = true
			break
		}
		// Once the writes stop being taken, a short deadline ends them.
		g1.conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	}
	if !blocked {
		t.Error("a guest that never reads could write 4 GiB of commands")
	}
	g0.write(t, `{"op":"stats","id":"s"}`+"\n")
	if rsp := g0.reply(t); !rsp.OK || rsp.ID != "s" || rsp.Stats == nil {
		t.Errorf("guest 0 while guest 1 is stuck: %+v", rsp)
	}
	if rsp, err := command(path, fault.Request{Op: "list"}); err != nil || !rsp.OK {
		t.Errorf("control socket while guest 1 is stuck: %+v, %v", rsp, err)
	}
	// Close ends the stuck guest's connection too (checkGoroutines).
}
