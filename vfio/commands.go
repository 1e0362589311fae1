package vfio

import (
	"math/bits"

	"github.com/hcaemu/hcaemu/dma"
	"golang.org/x/sys/unix"
)

// maxIRQs caps the vector count a device may claim per IRQ index (INTx and
// the ERR/REQ notifiers are single; MSI and MSI-X are bounded by PCI).
var maxIRQs = [NumIRQs]uint32{IRQINTx: 1, IRQMSI: 32, IRQMSIX: 2048, IRQErr: 1, IRQReq: 1}

// version negotiates the protocol and makes the device. Any error closes the
// connection.
func (c *conn) version(m *msg) ([]byte, error) {
	if len(m.fds) > 0 {
		return nil, reqError(unix.EINVAL, "%d fds attached; VERSION takes none", len(m.fds))
	}
	caps, err := ParseVersion(m.payload)
	if err != nil {
		return nil, reqError(unix.EINVAL, "%v", err)
	}
	if c.s.NewDevice == nil {
		return nil, reqError(unix.ENODEV, "server has no NewDevice")
	}
	dev, err := c.s.NewDevice(Host{Mem: c.mem, MSIX: func(v int) { c.irqs.trigger(IRQMSIX, v) }})
	if err != nil {
		return nil, reqError(unix.ENODEV, "creating the device: %v", err)
	}
	if dev == nil {
		return nil, reqError(unix.ENODEV, "NewDevice returned no device")
	}
	c.dev = dev
	for i := range NumIRQs {
		n := min(dev.IRQCount(i), maxIRQs[i])
		c.irqCount[i] = n
		c.irqs.size(i, n)
	}
	for i := range RegionROM {
		if sz := dev.RegionSize(i); sz&(sz-1) != 0 {
			c.log.Error("vfio-user: BAR size is not a power of two; QEMU will abort", "region", i, "size", sz)
		}
	}
	c.client = caps
	c.versioned = true
	c.log.Info("vfio-user: client connected", "major", caps.Major, "minor", caps.Minor,
		"max_msg_fds", caps.MaxMsgFDs, "max_data_xfer_size", caps.MaxDataXferSize)
	return versionReply(int(m.hdr.Size)), nil
}

func (c *conn) dmaMap(m *msg) ([]byte, error) {
	p := m.payload
	if len(p) < dmaMapSize {
		return nil, reqError(unix.EINVAL, "payload of %d bytes, want %d", len(p), dmaMapSize)
	}
	argsz, flags := le.Uint32(p[0:]), le.Uint32(p[4:])
	off, iova, size := le.Uint64(p[8:]), le.Uint64(p[16:]), le.Uint64(p[24:])
	if argsz < dmaMapSize {
		return nil, reqError(unix.EINVAL, "argsz %d < %d", argsz, dmaMapSize)
	}
	if flags&^(DMAFlagRead|DMAFlagWrite) != 0 {
		return nil, reqError(unix.EINVAL, "unknown flags %#x", flags)
	}
	if len(m.fds) > 1 {
		return nil, reqError(unix.EINVAL, "%d fds attached, want 0 or 1", len(m.fds))
	}
	fd := -1
	if len(m.fds) == 1 {
		fd = m.takeFDs()[0] // Map owns it from here on
	}
	if err := c.mem.Map(iova, size, off, fd, flags&DMAFlagWrite != 0); err != nil {
		return nil, err
	}
	c.log.Debug("vfio-user: DMA_MAP", "iova", iova, "size", size, "offset", off, "flags", flags, "fd", fd >= 0)
	return nil, nil
}

func (c *conn) dmaUnmap(m *msg) ([]byte, error) {
	p := m.payload
	if len(p) < dmaUnmapSize {
		return nil, reqError(unix.EINVAL, "payload of %d bytes, want %d", len(p), dmaUnmapSize)
	}
	argsz, flags := le.Uint32(p[0:]), le.Uint32(p[4:])
	iova, size := le.Uint64(p[8:]), le.Uint64(p[16:])
	if argsz < dmaUnmapSize {
		return nil, reqError(unix.EINVAL, "argsz %d < %d", argsz, dmaUnmapSize)
	}
	if flags&DMAUnmapGetDirtyBitmap != 0 {
		return nil, reqError(unix.EINVAL, "flag GET_DIRTY_BITMAP: dirty pages are not tracked")
	}
	if flags&^DMAUnmapAll != 0 {
		return nil, reqError(unix.EINVAL, "unknown flags %#x", flags)
	}
	if flags&DMAUnmapAll != 0 {
		if iova != 0 || size != 0 {
			return nil, reqError(unix.EINVAL, "UNMAP_ALL with address %#x size %#x, want 0, 0", iova, size)
		}
		c.mem.UnmapAll()
	} else if err := c.mem.Unmap(iova, size); err != nil {
		return nil, err
	}
	c.log.Debug("vfio-user: DMA_UNMAP", "iova", iova, "size", size, "flags", flags)
	return p[:dmaUnmapSize], nil
}

func (c *conn) getInfo(m *msg) ([]byte, error) {
	p := m.payload
	if len(p) < deviceInfoSize {
		return nil, reqError(unix.EINVAL, "payload of %d bytes, want %d", len(p), deviceInfoSize)
	}
	if argsz := le.Uint32(p); argsz < deviceInfoSize {
		return nil, reqError(unix.EINVAL, "argsz %d < %d", argsz, deviceInfoSize)
	}
	r := make([]byte, deviceInfoSize)
	le.PutUint32(r[0:], deviceInfoSize)
	le.PutUint32(r[4:], DeviceFlagPCI|DeviceFlagReset)
	le.PutUint32(r[8:], NumRegions)
	le.PutUint32(r[12:], NumIRQs)
	return r, nil
}

func (c *conn) getRegionInfo(m *msg) ([]byte, error) {
	p := m.payload
	if len(p) < regionInfoSize {
		return nil, reqError(unix.EINVAL, "payload of %d bytes, want %d", len(p), regionInfoSize)
	}
	argsz, index := le.Uint32(p[0:]), le.Uint32(p[8:])
	if argsz < regionInfoSize {
		return nil, reqError(unix.EINVAL, "argsz %d < %d", argsz, regionInfoSize)
	}
	if index >= NumRegions {
		return nil, reqError(unix.EINVAL, "index %d >= %d regions", index, NumRegions)
	}
	size := c.dev.RegionSize(int(index))
	var flags uint32
	if size != 0 {
		flags = RegionFlagRead | RegionFlagWrite // trapped: never MMAP, no caps
	}
	// The full info is 32 bytes (no capability chain), which always fits:
	// argsz >= 32 was checked, so min(full, argsz) = 32.
	r := make([]byte, regionInfoSize)
	le.PutUint32(r[0:], regionInfoSize)
	le.PutUint32(r[4:], flags)
	le.PutUint32(r[8:], index)
	le.PutUint32(r[12:], 0) // cap_offset
	le.PutUint64(r[16:], size)
	le.PutUint64(r[24:], 0) // offset
	return r, nil
}

func (c *conn) getIRQInfo(m *msg) ([]byte, error) {
	p := m.payload
	if len(p) < irqInfoSize {
		return nil, reqError(unix.EINVAL, "payload of %d bytes, want %d", len(p), irqInfoSize)
	}
	argsz, index := le.Uint32(p[0:]), le.Uint32(p[8:])
	if argsz < irqInfoSize {
		return nil, reqError(unix.EINVAL, "argsz %d < %d", argsz, irqInfoSize)
	}
	if index >= NumIRQs {
		return nil, reqError(unix.EINVAL, "index %d >= %d IRQ indexes", index, NumIRQs)
	}
	count := c.irqCount[index]
	if index == IRQErr && count == 0 {
		// QEMU only traces this; count 0 would make it warn that error
		// recovery cannot be enabled.
		return nil, &expectedError{reqError(unix.EINVAL, "index %d (ERR): no error notifier", index)}
	}
	flags := uint32(IRQInfoEventfd)
	if index == IRQINTx {
		flags |= IRQInfoMaskable | IRQInfoAutomasked
	}
	r := make([]byte, irqInfoSize)
	le.PutUint32(r[0:], irqInfoSize)
	le.PutUint32(r[4:], flags)
	le.PutUint32(r[8:], index)
	le.PutUint32(r[12:], count)
	return r, nil
}

func (c *conn) setIRQs(m *msg) ([]byte, error) {
	p := m.payload
	if len(p) < setIRQsSize {
		return nil, reqError(unix.EINVAL, "payload of %d bytes, want at least %d", len(p), setIRQsSize)
	}
	argsz, flags, index := le.Uint32(p[0:]), le.Uint32(p[4:]), le.Uint32(p[8:])
	start, count := le.Uint32(p[12:]), le.Uint32(p[16:])
	data, action := flags&irqDataMask, flags&irqActionMask
	switch {
	case argsz < setIRQsSize || uint64(argsz) > uint64(len(p)):
		return nil, reqError(unix.EINVAL, "argsz %d outside [%d, payload %d]", argsz, setIRQsSize, len(p))
	case flags&^(irqDataMask|irqActionMask) != 0:
		return nil, reqError(unix.EINVAL, "unknown flags %#x", flags)
	case bits.OnesCount32(data) != 1 || bits.OnesCount32(action) != 1:
		return nil, reqError(unix.EINVAL, "flags %#x: want exactly one DATA and one ACTION bit", flags)
	case index >= NumIRQs:
		return nil, reqError(unix.EINVAL, "index %d >= %d IRQ indexes", index, NumIRQs)
	}
	dataLen := uint64(len(p) - setIRQsSize)
	if data == IRQDataBool {
		if dataLen != uint64(count) {
			return nil, reqError(unix.EINVAL, "DATA_BOOL with %d data bytes for count %d", dataLen, count)
		}
	} else if dataLen != 0 {
		return nil, reqError(unix.EINVAL, "%d data bytes after the header; only DATA_BOOL has data", dataLen)
	}
	if len(m.fds) > 0 && data != IRQDataEventfd {
		return nil, reqError(unix.EINVAL, "%d fds attached without DATA_EVENTFD", len(m.fds))
	}
	if count == 0 {
		if start != 0 || action != IRQActionTrigger || data != IRQDataNone {
			return nil, reqError(unix.EINVAL, "count 0 with start %d flags %#x: only start 0, DATA_NONE|ACTION_TRIGGER disables an index", start, flags)
		}
		c.irqs.disable(int(index))
		c.log.Debug("vfio-user: IRQ index disabled", "index", index)
		return nil, nil
	}
	n := c.irqCount[index]
	if start >= n || count > n-start { // overflow-safe start+count <= n
		return nil, reqError(unix.EINVAL, "index %d: start %d count %d exceed %d vectors", index, start, count, n)
	}
	if (index == IRQErr || index == IRQReq) && action != IRQActionTrigger {
		return nil, reqError(unix.EINVAL, "index %d: only ACTION_TRIGGER", index)
	}
	if data == IRQDataEventfd && len(m.fds) != 0 && uint64(len(m.fds)) != uint64(count) {
		return nil, reqError(unix.EINVAL, "%d fds for count %d; want 0 or count", len(m.fds), count)
	}
	if action != IRQActionTrigger {
		// MSI-X masking is QEMU's business (it swaps eventfds instead) and
		// INTx is not wired to anything: accept and ignore. Any resample
		// fds are closed with the message.
		return nil, nil
	}
	switch data {
	case IRQDataEventfd:
		if len(m.fds) == 0 {
			c.irqs.deassign(int(index), start, count)
			c.log.Debug("vfio-user: IRQ vectors de-assigned", "index", index, "start", start, "count", count)
			return nil, nil
		}
		for i, fd := range m.fds {
			if !isEventfd(fd) {
				return nil, reqError(unix.EINVAL, "fd %d (for vector %d) is not an eventfd", i, start+uint32(i))
			}
		}
		c.irqs.assign(int(index), start, m.takeFDs())
		c.log.Debug("vfio-user: IRQ eventfds assigned", "index", index, "start", start, "count", count)
	case IRQDataNone:
		for v := start; v-start < count; v++ {
			c.irqs.trigger(int(index), int(v))
		}
	case IRQDataBool:
		for i, b := range p[setIRQsSize:] {
			if b != 0 {
				c.irqs.trigger(int(index), int(start)+i)
			}
		}
	}
	return nil, nil
}

// regionAccess decodes and checks the common part of REGION_READ and
// REGION_WRITE.
func (c *conn) regionAccess(p []byte) (index int, off uint64, count uint32, err error) {
	if len(p) < regionAccessLen {
		return 0, 0, 0, reqError(unix.EINVAL, "payload of %d bytes, want at least %d", len(p), regionAccessLen)
	}
	off, region, count := le.Uint64(p[0:]), le.Uint32(p[8:]), le.Uint32(p[12:])
	if region >= NumRegions {
		return 0, 0, 0, reqError(unix.EINVAL, "region %d >= %d", region, NumRegions)
	}
	if count == 0 || count > MaxDataXferSize {
		return 0, 0, 0, reqError(unix.EINVAL, "region %d: count %d outside [1, %d]", region, count, MaxDataXferSize)
	}
	size := c.dev.RegionSize(int(region))
	if size == 0 {
		return 0, 0, 0, reqError(unix.EINVAL, "region %d is absent", region)
	}
	if end, ok := dma.End(off, uint64(count)); !ok || end > size {
		return 0, 0, 0, reqError(unix.EINVAL, "region %d: offset %#x count %d beyond size %#x", region, off, count, size)
	}
	return int(region), off, count, nil
}

func (c *conn) regionRead(m *msg) ([]byte, error) {
	p := m.payload
	index, off, count, err := c.regionAccess(p)
	if err != nil {
		return nil, err
	}
	if len(p) != regionAccessLen {
		return nil, reqError(unix.EINVAL, "payload of %d bytes, want %d", len(p), regionAccessLen)
	}
	r := make([]byte, regionAccessLen+int(count))
	copy(r, p[:regionAccessLen])
	if err := c.dev.ReadRegion(index, off, r[regionAccessLen:]); err != nil {
		return nil, reqError(errnoFor(err), "region %d offset %#x count %d: %v", index, off, count, err)
	}
	return r, nil
}

func (c *conn) regionWrite(m *msg) ([]byte, error) {
	p := m.payload
	index, off, count, err := c.regionAccess(p)
	if err != nil {
		return nil, err
	}
	if uint64(len(p)-regionAccessLen) != uint64(count) {
		return nil, reqError(unix.EINVAL, "region %d: %d data bytes for count %d", index, len(p)-regionAccessLen, count)
	}
	if err := c.dev.WriteRegion(index, off, p[regionAccessLen:]); err != nil {
		return nil, reqError(errnoFor(err), "region %d offset %#x count %d: %v", index, off, count, err)
	}
	return p[:regionAccessLen], nil
}

func (c *conn) reset(m *msg) ([]byte, error) {
	if len(m.payload) != 0 {
		return nil, reqError(unix.EINVAL, "payload of %d bytes; DEVICE_RESET has none", len(m.payload))
	}
	c.dev.Reset()
	c.log.Debug("vfio-user: device reset")
	return nil, nil
}
