package fabric

import "testing"

// BenchmarkFramePool takes a frame buffer from the pool and gives it back:
// the steady state of every packet the fabric carries.
func BenchmarkFramePool(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Release(NewFrame())
	}
}
