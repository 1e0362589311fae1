package emu

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// Command channel (pvrdma.md §7).
const (
	cmdReqSize  = 184 // the driver copies the whole request union
	cmdRespSize = 176
	ackBase     = 0x80000000
)

// Opcodes.
const (
	CmdQueryPort = iota
	CmdQueryPKey
	CmdCreatePD
	CmdDestroyPD
	CmdCreateMR
	CmdDestroyMR
	CmdCreateCQ
	CmdResizeCQ
	CmdDestroyCQ
	CmdCreateQP
	CmdModifyQP
	CmdQueryQP
	CmdDestroyQP
	CmdCreateUC
	CmdDestroyUC
	CmdCreateBind
	CmdDestroyBind
	CmdCreateSRQ
	CmdModifySRQ
	CmdQuerySRQ
	CmdDestroySRQ
	numCmds
)

// Errno values reported in ERR and the response's err byte.
const (
	errPerm   = 1
	errNoEnt  = 2
	errIO     = 5
	errNoMem  = 12
	errFault  = 14
	errBusy   = 16
	errInval  = 22
	errNotSup = 95
)

var cmdNames = [numCmds]string{
	"QUERY_PORT", "QUERY_PKEY", "CREATE_PD", "DESTROY_PD", "CREATE_MR", "DESTROY_MR",
	"CREATE_CQ", "RESIZE_CQ", "DESTROY_CQ", "CREATE_QP", "MODIFY_QP", "QUERY_QP",
	"DESTROY_QP", "CREATE_UC", "DESTROY_UC", "CREATE_BIND", "DESTROY_BIND",
	"CREATE_SRQ", "MODIFY_SRQ", "QUERY_SRQ", "DESTROY_SRQ",
}

// cmdErr is a command failure: the errno the driver sees and why.
type cmdErr struct {
	errno uint32
	msg   string
}

func (e *cmdErr) Error() string { return e.msg }

func fail(errno uint32, format string, args ...any) *cmdErr {
	return &cmdErr{errno: errno, msg: fmt.Sprintf(format, args...)}
}

// req is a private copy of one command request; resp is the response being
// built. Handlers read only their command's own bytes.
type req [cmdReqSize]byte
type resp [cmdRespSize]byte

func (r *req) u8(off int) uint8   { return r[off] }
func (r *req) u16(off int) uint16 { return binary.LittleEndian.Uint16(r[off:]) }
func (r *req) u32(off int) uint32 { return binary.LittleEndian.Uint32(r[off:]) }
func (r *req) u64(off int) uint64 { return binary.LittleEndian.Uint64(r[off:]) }

func (r *resp) put16(off int, v uint16) { binary.LittleEndian.PutUint16(r[off:], v) }
func (r *resp) put32(off int, v uint32) { binary.LittleEndian.PutUint32(r[off:], v) }

type cmdHandler func(d *Device, q *req, p *resp) *cmdErr

var cmdTable = [numCmds]cmdHandler{
	CmdQueryPort:   (*Device).cmdQueryPort,
	CmdQueryPKey:   (*Device).cmdQueryPKey,
	CmdCreatePD:    (*Device).cmdCreatePD,
	CmdDestroyPD:   (*Device).cmdDestroyPD,
	CmdCreateMR:    (*Device).cmdCreateMR,
	CmdDestroyMR:   (*Device).cmdDestroyMR,
	CmdCreateCQ:    (*Device).cmdCreateCQ,
	CmdResizeCQ:    (*Device).cmdResizeCQ,
	CmdDestroyCQ:   (*Device).cmdDestroyCQ,
	CmdCreateQP:    (*Device).cmdCreateQP,
	CmdModifyQP:    (*Device).cmdModifyQP,
	CmdQueryQP:     (*Device).cmdQueryQP,
	CmdDestroyQP:   (*Device).cmdDestroyQP,
	CmdCreateUC:    (*Device).cmdCreateUC,
	CmdDestroyUC:   (*Device).cmdDestroyUC,
	CmdCreateBind:  (*Device).cmdCreateBind,
	CmdDestroyBind: (*Device).cmdDestroyBind,
	CmdCreateSRQ:   (*Device).cmdCreateSRQ,
	CmdModifySRQ:   (*Device).cmdModifySRQ,
	CmdQuerySRQ:    (*Device).cmdQuerySRQ,
	CmdDestroySRQ:  (*Device).cmdDestroySRQ,
}

// request executes the command in the command slot, synchronously inside the
// REQUEST write: the driver reads ERR right after it.
func (d *Device) request() {
	if d.dsr == nil || !d.active {
		d.log.Warn("REQUEST before the device was activated")
		d.errReg = errInval
		return
	}
	var q req
	if err := d.mem.ReadAt(q[:], d.dsr.cmdSlot); err != nil {
		d.log.Warn("command slot unreadable", "err", err)
		d.errReg = errFault
		return
	}
	op := q.u32(8)
	var p resp
	copy(p[0:8], q[0:8]) // echo the response key
	if op >= numCmds {
		d.log.Warn("unknown command opcode", "opcode", op)
		d.errReg = errInval
		p.put32(8, ackBase+op)
		p[12] = errInval
		d.respond(&p)
		return
	}
	p.put32(8, ackBase+op)
	if e := cmdTable[op](d, &q, &p); e != nil {
		d.log.Warn("command failed", "cmd", cmdNames[op], "errno", e.errno, "why", e.msg)
		d.errReg = e.errno
		p[12] = uint8(e.errno)
	} else {
		d.log.Debug("command", "cmd", cmdNames[op])
		d.errReg = 0
	}
	d.respond(&p)
}

func (d *Device) respond(p *resp) {
	if err := d.mem.WriteAt(p[:], d.dsr.respSlot); err != nil {
		d.log.Warn("response slot unwritable", "err", err)
		d.errReg = errFault
	}
	d.raise(IntrResponse)
}

// --- port, P_Key, GID table ---------------------------------------------------

// Port attribute values (pvrdma_port_attr).
const (
	portStateActive = 4
	portStateDown   = 1
	mtu1024         = 3
	mtu4096         = 5
	physStateLinkUp = 5
)

func (d *Device) checkPort(port uint8) *cmdErr {
	if port < 1 || port > d.caps.PhysPortCnt {
		return fail(errInval, "port %d outside 1..%d", port, d.caps.PhysPortCnt)
	}
	return nil
}

func (d *Device) cmdQueryPort(q *req, p *resp) *cmdErr {
	if e := d.checkPort(q.u8(16)); e != nil {
		return e
	}
	p.put32(16, portStateActive)
	p.put32(20, mtu4096)
	p.put32(24, mtu1024) // 1500-byte Ethernet: largest IB MTU that fits
	p.put32(28, d.caps.GIDTblLen)
	p.put32(32, 0)
	p.put32(36, 0x80000000)
	p.put32(44, d.res.qkeyViolations)
	p.put16(48, d.caps.MaxPKeys)
	p[55] = 1  // max_vl_num
	p[59] = 1  // width 1X
	p[60] = 32 // EDR: 25 Gb/s per lane
	p[61] = physStateLinkUp
	return nil
}

func (d *Device) cmdQueryPKey(q *req, p *resp) *cmdErr {
	if e := d.checkPort(q.u8(16)); e != nil {
		return e
	}
	if idx := q.u8(17); uint16(idx) >= d.caps.MaxPKeys {
		return fail(errInval, "P_Key index %d >= %d", idx, d.caps.MaxPKeys)
	}
	p.put16(16, 0xFFFF)
	return nil
}

// GID types in CREATE_BIND.
const (
	gidTypeV1 = 0x1
	gidTypeV2 = 0x2
)

func (d *Device) cmdCreateBind(q *req, p *resp) *cmdErr {
	idx := q.u32(24)
	if idx >= d.caps.GIDTblLen {
		return fail(errInval, "GID index %d >= %d", idx, d.caps.GIDTblLen)
	}
	typ := q.u8(44)
	if typ != gidTypeV1 && typ != gidTypeV2 {
		return fail(errInval, "GID type %#x", typ)
	}
	var g GIDEntry
	copy(g.GID[:], q[28:44])
	g.Type = typ
	g.Valid = true
	d.res.gids[idx] = g
	d.log.Info("GID bound", "index", idx, "gid", g.String())
	if mac, ok := macFromLinkLocal(g.GID); ok && mac != d.wireMAC {
		// The driver binds the port's default GID from the paired vmxnet3's
		// MAC: that is the MAC its RoCE frames carry.
		d.wireMAC = mac
		d.log.Info("source MAC from the default GID", "mac", net.HardwareAddr(mac[:]).String())
	}
	d.announce()
	return nil
}

func (d *Device) cmdDestroyBind(q *req, p *resp) *cmdErr {
	idx := q.u32(16)
	if idx >= d.caps.GIDTblLen {
		return fail(errInval, "GID index %d >= %d", idx, d.caps.GIDTblLen)
	}
	if !d.res.gids[idx].Valid {
		return fail(errInval, "GID index %d not bound", idx)
	}
	d.res.gids[idx] = GIDEntry{}
	d.announce()
	return nil
}

// macFromLinkLocal inverts the EUI-64 of a link-local GID fe80::/64
// (xx:xx:xx:ff:fe:xx:xx:xx with the universal/local bit flipped).
func macFromLinkLocal(g [16]byte) ([6]byte, bool) {
	if g[0] != 0xfe || g[1] != 0x80 || g[2]|g[3]|g[4]|g[5]|g[6]|g[7] != 0 || g[11] != 0xff || g[12] != 0xfe {
		return [6]byte{}, false
	}
	return [6]byte{g[8] ^ 2, g[9], g[10], g[13], g[14], g[15]}, true
}

// announce tells the fabric which addresses (GIDs) this HCA owns.
func (d *Device) announce() {
	if d.port == nil {
		return
	}
	var addrs []netip.Addr
	for _, g := range d.res.gids {
		if g.Valid {
			addrs = append(addrs, gidAddr(g.GID))
		}
	}
	d.port.SetAddrs(addrs)
}

// --- user contexts ---------------------------------------------------------------

func (d *Device) cmdCreateUC(q *req, p *resp) *cmdErr {
	pfn := q.u64(16)
	// BAR2 is naturally aligned to its size, so the low bits of the PFN are
	// the UAR index; the high bits must name BAR2 where the guest put it.
	idx := uint32(pfn & uint64(d.caps.MaxUAR-1))
	if bar := d.uarBase(); bar != 0 && pfn-uint64(idx) != bar>>12 {
		return fail(errInval, "UAR PFN %#x is not in BAR2 at %#x", pfn, bar)
	}
	if idx == 0 {
		return fail(errInval, "UAR PFN %#x names the kernel's page 0", pfn)
	}
	for _, h := range d.res.uc.handles() {
		if d.res.uc.get(h).uar == idx {
			return fail(errBusy, "UAR page %d already has a context", idx)
		}
	}
	h, e := d.res.uc.add(&ucontext{uar: idx})
	if e != nil {
		return e
	}
	p.put32(16, h)
	return nil
}

// uarBase is BAR2's guest-physical base as the guest last programmed it.
func (d *Device) uarBase() uint64 {
	var b [4]byte
	d.pci.Read(0x18, b[:])
	return uint64(binary.LittleEndian.Uint32(b[:]) &^ 0xF)
}

func (d *Device) cmdDestroyUC(q *req, p *resp) *cmdErr {
	h := q.u32(16)
	if d.res.uc.get(h) == nil {
		return fail(errInval, "no context %d", h)
	}
	d.destroyContextObjects(h)
	d.res.uc.del(h)
	return nil
}
