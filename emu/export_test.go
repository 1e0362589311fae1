package emu

// WithLock runs fn while holding the device lock, as the engine does while it
// works through a batch of frames (tests of what must not wait for it).
func (d *Device) WithLock(fn func()) {
	d.mu.Lock()
	defer d.unlock()
	fn()
}
