package main

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fault"
)

// TestControlSocket: the run's control socket answers commands; a guest's
// socket path in use by a live listener is refused, a stale one (its
// process gone) is replaced; after Close nothing answers.
func TestControlSocket(t *testing.T) {
	inj, err := fault.NewInjector(&fault.Plan{}, fault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inj.Close()
	dir := t.TempDir()
	sock := filepath.Join(dir, "control.sock")
	ctl, err := listenControl(sock, inj)
	if err != nil {
		t.Fatal(err)
	}
	if rsp, err := controlCommand(sock, fault.Request{Op: "list"}); err != nil || !rsp.OK {
		t.Fatalf("list: %+v, %v", rsp, err)
	}
	guest := filepath.Join(dir, "g0.faults")
	if err := ctl.ListenGuest(guest); err != nil {
		t.Fatal(err)
	}
	if err := ctl.ListenGuest(guest); err == nil {
		t.Error("a second listener on a live guest socket was accepted")
	}
	// A stale socket file (a listener of a process that is gone) is replaced.
	stale := filepath.Join(dir, "g1.faults")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if err := ctl.ListenGuest(stale); err != nil {
		t.Errorf("a stale guest socket was not replaced: %v", err)
	}
	if rsp, err := controlCommand(guest, fault.Request{Op: "stats"}); err != nil || !rsp.OK {
		t.Errorf("guest stats: %+v, %v", rsp, err)
	}
	if err := ctl.Close(); err != nil {
		t.Error(err)
	}
	if _, err := controlCommand(sock, fault.Request{Op: "list"}); err == nil {
		t.Error("the control socket answered after Close")
	}
}
