package capture

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// loadVectors reads the full frames of spec rocev2.md §9.5 (the roce
// package's text2pcap file), by name.
func loadVectors(t testing.TB) map[string][]byte {
	t.Helper()
	f, err := os.Open("../../roce/testdata/vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	var name string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "name "):
			name = strings.TrimPrefix(line, "name ")
		default:
			fields := strings.Fields(line)
			b, err := hex.DecodeString(strings.Join(fields[1:], ""))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out[name] = append(out[name], b...)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type pcapRecord struct {
	sec, frac uint32
	origLen   uint32
	data      []byte
}

// readPcap decodes a little-endian classic pcap file.
func readPcap(t *testing.T, b []byte) (magic, snap, link uint32, recs []pcapRecord) {
	t.Helper()
	if len(b) < 24 {
		t.Fatalf("pcap too short: %d", len(b))
	}
	le := binary.LittleEndian
	magic, snap, link = le.Uint32(b), le.Uint32(b[16:]), le.Uint32(b[20:])
	if le.Uint16(b[4:]) != 2 || le.Uint16(b[6:]) != 4 {
		t.Fatalf("version %d.%d", le.Uint16(b[4:]), le.Uint16(b[6:]))
	}
	b = b[24:]
	for len(b) > 0 {
		if len(b) < 16 {
			t.Fatalf("truncated record header")
		}
		r := pcapRecord{sec: le.Uint32(b), frac: le.Uint32(b[4:]), origLen: le.Uint32(b[12:])}
		n := int(le.Uint32(b[8:]))
		if len(b) < 16+n {
			t.Fatalf("truncated record")
		}
		r.data = b[16 : 16+n]
		recs = append(recs, r)
		b = b[16+n:]
	}
	return
}

type closeBuffer struct {
	bytes.Buffer
	closed int
}

func (c *closeBuffer) Close() error { c.closed++; return nil }

func TestPcapWriter(t *testing.T) {
	frames := loadVectors(t)
	ts := time.Date(2026, 11, 21, 7, 0, 0, 123456789, time.UTC)
	for _, nano := range []bool{false, true} {
		var buf closeBuffer
		w, err := NewPcapWriter(&buf, PcapOptions{Nanosecond: nano, SnapLen: 100})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WritePacket(ts, frames["V1"]); err != nil { // 122 bytes, truncated to 100
			t.Fatal(err)
		}
		if err := w.WritePacket(ts.Add(time.Second), frames["V3"]); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil || buf.closed != 1 {
			t.Fatalf("Close: %v, closed %d", err, buf.closed)
		}
		if err := w.Close(); err != nil || buf.closed != 1 {
			t.Fatalf("second Close: %v, closed %d", err, buf.closed)
		}
		if err := w.WritePacket(ts, frames["V3"]); err != ErrClosed {
			t.Fatalf("write after Close: %v", err)
		}
		magic, snap, link, recs := readPcap(t, buf.Bytes())
		wantMagic, wantFrac := uint32(0xA1B2C3D4), uint32(123456)
		if nano {
			wantMagic, wantFrac = 0xA1B23C4D, 123456789
		}
		if magic != wantMagic || snap != 100 || link != LinkTypeEthernet {
			t.Errorf("header magic %#x snap %d link %d", magic, snap, link)
		}
		if len(recs) != 2 {
			t.Fatalf("%d records", len(recs))
		}
		if recs[0].sec != uint32(ts.Unix()) || recs[0].frac != wantFrac || recs[1].sec != uint32(ts.Unix())+1 {
			t.Errorf("timestamps %+v", recs[0])
		}
		if recs[0].origLen != 122 || !bytes.Equal(recs[0].data, frames["V1"][:100]) {
			t.Errorf("record 0: orig %d, %d bytes", recs[0].origLen, len(recs[0].data))
		}
		if recs[1].origLen != 62 || !bytes.Equal(recs[1].data, frames["V3"]) {
			t.Errorf("record 1 differs")
		}
	}
}

func TestPcapWriterDefaults(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewPcapWriter(&buf, PcapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil { // bytes.Buffer is not an io.Closer
		t.Fatal(err)
	}
	_, snap, _, recs := readPcap(t, buf.Bytes())
	if snap != DefaultSnapLen || len(recs) != 0 {
		t.Errorf("snap %d, %d records", snap, len(recs))
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("disk full")
	}
	f.n--
	return len(p), nil
}

func TestPcapWriterErrors(t *testing.T) {
	if _, err := NewPcapWriter(&failWriter{}, PcapOptions{}); err == nil {
		t.Error("header write error not reported")
	}
	w, err := NewPcapWriter(&failWriter{n: 1}, PcapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e1 := w.WritePacket(time.Now(), []byte{1})
	e2 := w.WritePacket(time.Now(), []byte{1})
	if e1 == nil || e2 != e1 {
		t.Errorf("errors not sticky: %v, %v", e1, e2)
	}
}

// TestPcapWriterConcurrent writes from several goroutines (run with -race)
// and checks that no record is torn.
func TestPcapWriterConcurrent(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewPcapWriter(&buf, PcapOptions{Nanosecond: true})
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 200
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				frame := bytes.Repeat([]byte{byte(g)}, 60+i)
				if err := w.WritePacket(time.Now(), frame); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	w.Close()
	_, _, _, recs := readPcap(t, buf.Bytes())
	if len(recs) != writers*each {
		t.Fatalf("%d records, want %d", len(recs), writers*each)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		g := r.data[0]
		if !bytes.Equal(r.data, bytes.Repeat([]byte{g}, len(r.data))) || int(r.origLen) != len(r.data) {
			t.Fatal("torn record")
		}
		seen[fmt.Sprint(g, len(r.data))] = true
	}
	if len(seen) != writers*each {
		t.Errorf("%d distinct records", len(seen))
	}
}

// TestPcapUpperPDU: with a dissector name the file is link type 252 and
// every record starts with the exported-PDU tags naming it (tag 12, its
// length padded to 4, the name, the end tag), then the packet; the
// record's lengths count the tags.
func TestPcapUpperPDU(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewPcapWriter(&buf, PcapOptions{Dissector: "infiniband"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(time.Unix(1, 0), []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	le := binary.LittleEndian
	if le.Uint32(b[20:]) != LinkTypeUpperPDU {
		t.Fatalf("link type %d", le.Uint32(b[20:]))
	}
	rec := b[24:]
	want := append([]byte{0, 12, 0, 12}, "infiniband\x00\x00"...)
	want = append(want, 0, 0, 0, 0, 1, 2, 3, 4)
	if le.Uint32(rec[8:]) != uint32(len(want)) || le.Uint32(rec[12:]) != uint32(len(want)) || !bytes.Equal(rec[16:], want) {
		t.Fatalf("record %x", rec)
	}
	if _, err := NewPcapWriter(&buf, PcapOptions{Dissector: string(make([]byte, 256))}); err == nil {
		t.Fatal("a 256-byte dissector name")
	}
}
