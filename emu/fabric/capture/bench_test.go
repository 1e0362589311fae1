package capture

import (
	"testing"
	"time"
)

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkPcapWrite writes 4 KiB frames to a discarding pcap writer.
func BenchmarkPcapWrite(b *testing.B) {
	fr := frame4("10.0.0.1", "10.0.0.2")
	fr = append(fr, make([]byte, 4096+42-len(fr))...) // a 4 KiB RoCE payload with its headers
	w, _ := NewPcapWriter(discard{}, PcapOptions{})
	ts := time.Unix(1700000000, 5000)
	b.SetBytes(int64(len(fr)))
	b.ReportAllocs()
	for b.Loop() {
		if err := w.WritePacket(ts, fr); err != nil {
			b.Fatal(err)
		}
	}
}
