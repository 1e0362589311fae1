package fabric

import (
	"bytes"
	"net"
	"path/filepath"
	"sync"
	"testing"
)

// socketPair is a sockConn accepted on a listener and the client end.
func socketPair(t *testing.T) (*sockConn, *net.UnixConn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := acceptSock(ln)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// TestSockConn: bytes go both ways, written in parts and read as they
// come; Close wakes a reader asleep on an empty socket and a writer asleep
// on a full one, both fail, and the descriptor is not used after.
func TestSockConn(t *testing.T) {
	s, c := socketPair(t)
	if uid, err := s.peerUID(); err != nil {
		t.Fatal(uid, err)
	}
	c.Write([]byte("hello"))
	buf := make([]byte, 64)
	if n, err := s.read(buf); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if err := s.writeAll([][]byte{[]byte("wor"), nil, []byte("ld")}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := c.Read(got); err != nil || !bytes.Equal(got, []byte("world")) {
		t.Fatalf("client read %q, %v", got, err)
	}

	var wg sync.WaitGroup
	var readErr, writeErr error
	var readN int
	wg.Go(func() { readN, readErr = s.read(buf) }) // nothing comes: asleep in poll
	big := make([]byte, 64<<20)                    // more than the socket holds: asleep in poll
	wg.Go(func() { writeErr = s.writeAll([][]byte{big}) })
	s.Close()
	wg.Wait()
	if readN != 0 && readErr == nil {
		t.Errorf("reader after Close: %d bytes", readN)
	}
	if writeErr == nil {
		t.Error("a 64 MiB write to a peer that reads nothing succeeded past Close")
	}
	if n, err := s.read(buf); n != 0 || err == nil {
		t.Errorf("read after Close: %d, %v", n, err)
	}
	if s.sendNow([][]byte{[]byte("x")}) != 0 {
		t.Error("sendNow after Close wrote")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestConsume(t *testing.T) {
	bufs := func() [][]byte { return [][]byte{[]byte("ab"), []byte("cde"), []byte("f")} }
	for n, want := range map[int]string{0: "abcdef", 1: "bcdef", 2: "cdef", 4: "ef", 5: "f", 6: ""} {
		if got := bytes.Join(consume(bufs(), n), nil); string(got) != want {
			t.Errorf("consume %d: %q, want %q", n, got, want)
		}
	}
}
