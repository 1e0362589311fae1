package emu

// WithLock runs fn while holding the device lock, as the engine does while it
// works through a batch of frames (tests of what must not wait for it).
func (d *Device) WithLock(fn func()) {
	d.mu.Lock()
	defer d.unlock()
	fn()
}

// EngineWork runs fn as the engine runs a unit of its work.
func (d *Device) EngineWork(fn func()) bool { return d.engineWork(fn) }
