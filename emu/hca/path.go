package hca

import "github.com/hcaemu/hcaemu/emu/transport"

// PathCache is a QP's last resolved path (transport.Env's Path), good
// while the device's address table (its generation) and the QP's address
// (key: the model's address vector and destination QP) are what they were
// when it was resolved. Every RC packet a QP receives checks its addresses
// against its path: resolved once per change, not once per packet.
type PathCache[K comparable] struct {
	gen  uint64 // the generation + 1; 0: empty
	key  K
	path transport.Path
	ok   bool
}

// Get returns the path stored for gen and key, and hit false when there
// is none (the table or the key changed since, or nothing was stored).
func (c *PathCache[K]) Get(gen uint64, key K) (path transport.Path, ok, hit bool) {
	if c.gen != gen+1 || c.key != key {
		return transport.Path{}, false, false
	}
	return c.path, c.ok, true
}

// Put stores what resolving key in the table of generation gen gave: a
// path, or ok false for none (a miss is remembered too).
func (c *PathCache[K]) Put(gen uint64, key K, path transport.Path, ok bool) {
	c.gen, c.key, c.path, c.ok = gen+1, key, path, ok
}
