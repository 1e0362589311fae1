package pvrdma

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
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
	// errAddrInUse (EADDRINUSE): CREATE_BIND of an address another port
	// on the fabric owns.
	errAddrInUse = 98
)

// cmdErr is a command failure: the errno the driver sees and why.
type cmdErr struct {
	errno uint32
	msg   string
	// kind classifies the driver's mistake; mistake is false when the
	// failure is not the driver's (a full table, a budget, an address
	// another guest holds, an injected fault).
	kind    hca.FindingKind
	mistake bool
}

func (e *cmdErr) Error() string { return e.msg }

// fail is a command failure. Unless errno says the device ran out of
// something (ENOMEM) or another port holds an address (EADDRINUSE), the
// driver should never have sent the command: strict mode reports it as a
// FindingCommand (as() reclassifies it). msg names the field the way
// pvrdma_dev_api.h does.
func fail(errno uint32, format string, args ...any) *cmdErr {
	return &cmdErr{errno: errno, msg: fmt.Sprintf(format, args...), kind: hca.FindingCommand,
		mistake: errno != errNoMem && errno != errAddrInUse}
}

// as reclassifies a command failure's finding.
func (e *cmdErr) as(kind hca.FindingKind) *cmdErr {
	e.kind = kind
	return e
}

// errnoNames are the names of the errnos commands fail with.
var errnoNames = map[uint32]string{
	errPerm: "EPERM", errNoEnt: "ENOENT", errIO: "EIO", errNoMem: "ENOMEM", errFault: "EFAULT",
	errBusy: "EBUSY", errInval: "EINVAL", errNotSup: "EOPNOTSUPP", errAddrInUse: "EADDRINUSE",
}

// cmdHandler runs one command on its private copy of the request slot and
// returns the response body (nil: the header alone).
type cmdHandler func(d *Device, slot []byte) (abi.Response, *cmdErr)

// addHandler installs the handler of one typed request: the request is decoded
// from the slot once, and the handler sees only the decoded value.
func addHandler[T any, P interface {
	*T
	abi.Request
}](t *[abi.NumOpcodes]cmdHandler, fn func(*Device, *T) (abi.Response, *cmdErr)) {
	t[P(new(T)).Opcode()] = func(d *Device, slot []byte) (abi.Response, *cmdErr) {
		var r T
		P(&r).Decode(slot)
		return fn(d, &r)
	}
}

// cmdTable maps each opcode to its handler; the request type names the
// opcode, so the two cannot disagree.
var cmdTable = func() (t [abi.NumOpcodes]cmdHandler) {
	addHandler(&t, (*Device).cmdQueryPort)
	addHandler(&t, (*Device).cmdQueryPKey)
	addHandler(&t, (*Device).cmdCreatePD)
	addHandler(&t, (*Device).cmdDestroyPD)
	addHandler(&t, (*Device).cmdCreateMR)
	addHandler(&t, (*Device).cmdDestroyMR)
	addHandler(&t, (*Device).cmdCreateCQ)
	addHandler(&t, (*Device).cmdResizeCQ)
	addHandler(&t, (*Device).cmdDestroyCQ)
	addHandler(&t, (*Device).cmdCreateQP)
	addHandler(&t, (*Device).cmdModifyQP)
	addHandler(&t, (*Device).cmdQueryQP)
	addHandler(&t, (*Device).cmdDestroyQP)
	addHandler(&t, (*Device).cmdCreateUC)
	addHandler(&t, (*Device).cmdDestroyUC)
	addHandler(&t, (*Device).cmdCreateBind)
	addHandler(&t, (*Device).cmdDestroyBind)
	addHandler(&t, (*Device).cmdCreateSRQ)
	addHandler(&t, (*Device).cmdModifySRQ)
	addHandler(&t, (*Device).cmdQuerySRQ)
	addHandler(&t, (*Device).cmdDestroySRQ)
	return t
}()

// request executes the command in the command slot, synchronously inside the
// REQUEST write: the driver reads ERR right after it.
func (d *Device) request() {
	if d.dsr == nil || !d.active {
		d.find(hca.FindingRegister, "ERR=22 EINVAL", "REQUEST written before the DSR was loaded and the device activated (CTL=ACTIVATE)")
		d.errReg = errInval
		return
	}
	if d.strict.Latched() {
		// Strict mode latched DEVICE_FATAL: the device takes no more
		// commands.
		d.errReg = errIO
		return
	}
	var slot [abi.CmdReqSize]byte
	if err := d.mem.ReadAt(slot[:], d.dsr.cmdSlot); err != nil {
		d.log.Warn("command slot unreadable", "err", err)
		d.errReg = errFault
		return
	}
	var hdr abi.CmdHdr
	hdr.Decode(slot[:])
	rspHdr := abi.CmdRespHdr{Response: hdr.Response, Ack: hdr.Cmd.Ack()}
	var rsp abi.Response
	if hdr.Cmd >= abi.NumOpcodes {
		d.find(hca.FindingCommand, "ERR=22 EINVAL", "pvrdma_cmd_hdr.cmd=%#x: not a command opcode (0..%d)", uint32(hdr.Cmd), abi.NumOpcodes-1)
		d.errReg = errInval
		rspHdr.Err = errInval
		d.countCommand(hdr.Cmd, errInval)
	} else if r, e := d.runCommand(hdr.Cmd, slot[:]); e != nil {
		if e.mistake {
			d.find(e.kind, fmt.Sprintf("%s failed: ERR=%d %s", hdr.Cmd, e.errno, errnoNames[e.errno]), "%s", e.msg)
		} else {
			d.log.Warn("command failed", "cmd", hdr.Cmd.String(), "errno", e.errno, "why", e.msg)
		}
		d.errReg = e.errno
		rspHdr.Err = uint8(e.errno)
		d.countCommand(hdr.Cmd, e.errno)
	} else {
		d.log.Debug("command", "cmd", hdr.Cmd.String())
		d.errReg = 0
		rsp = r
		d.countCommand(hdr.Cmd, 0)
	}
	var out [abi.CmdRespSize]byte
	if rsp != nil {
		rsp.Encode(out[:])
	}
	rspHdr.Encode(out[:])
	d.respond(out[:])
}

// runCommand runs a command unless an injected fault fails it first.
func (d *Device) runCommand(op abi.Opcode, slot []byte) (abi.Response, *cmdErr) {
	if e := d.faultCommand(op); e != nil {
		return nil, e
	}
	return cmdTable[op](d, slot)
}

func (d *Device) respond(out []byte) {
	if err := d.mem.WriteAt(out, d.dsr.respSlot); err != nil {
		d.log.Warn("response slot unwritable", "err", err)
		d.errReg = errFault
	}
	d.raise(abi.IntrVectorResponse)
}

// --- port, P_Key, GID table ---------------------------------------------------

func (d *Device) checkPort(port uint8) *cmdErr {
	if port < 1 || port > d.caps.PhysPortCnt {
		return fail(errInval, "port_num=%d: not 1..%d", port, d.caps.PhysPortCnt)
	}
	return nil
}

func (d *Device) cmdQueryPort(req *abi.CmdQueryPort) (abi.Response, *cmdErr) {
	if e := d.checkPort(req.PortNum); e != nil {
		return nil, e
	}
	state, phys := uint32(abi.PortStateActive), uint8(abi.PhysStateLinkUp)
	if d.wire.Down {
		state, phys = abi.PortStateDown, abi.PhysStateDisabled
	}
	return &abi.CmdQueryPortResp{Attrs: abi.PortAttr{
		State:        state,
		MaxMTU:       abi.MTU4096,
		ActiveMTU:    d.activeMTU,
		GIDTblLen:    d.caps.GIDTblLen,
		MaxMsgSz:     0x80000000,
		QKeyViolCntr: d.wire.QKeyViolations,
		PKeyTblLen:   d.caps.MaxPKeys,
		MaxVLNum:     1,
		ActiveWidth:  abi.Width1X,
		ActiveSpeed:  abi.SpeedEDR, // 25 Gb/s per lane
		PhysState:    phys,
	}}, nil
}

func (d *Device) cmdQueryPKey(req *abi.CmdQueryPKey) (abi.Response, *cmdErr) {
	if e := d.checkPort(req.PortNum); e != nil {
		return nil, e
	}
	if uint16(req.Index) >= d.caps.MaxPKeys {
		return nil, fail(errInval, "pvrdma_cmd_query_pkey.index=%d >= %d P_Keys", req.Index, d.caps.MaxPKeys)
	}
	return &abi.CmdQueryPKeyResp{PKey: 0xFFFF}, nil
}

func (d *Device) cmdCreateBind(req *abi.CmdCreateBind) (abi.Response, *cmdErr) {
	idx := req.Index
	if idx >= d.caps.GIDTblLen {
		return nil, fail(errInval, "pvrdma_cmd_create_bind.index=%d >= gid_tbl_len=%d", idx, d.caps.GIDTblLen)
	}
	typ := req.GIDType
	if typ != abi.GIDTypeFlagRoCEv1 && typ != abi.GIDTypeFlagRoCEv2 {
		return nil, fail(errInval, "pvrdma_cmd_create_bind.gid_type=%#x: not RoCE v1 or v2", typ)
	}
	g := GIDEntry{GID: req.NewGID}
	g.Type = typ
	g.Valid = true
	prev := d.res.gids[idx]
	d.res.gids[idx] = g
	if err := d.announce(); err != nil {
		// Another port owns the address: the binding fails and nothing
		// changes (the driver reads ERR alone: "could not create binding").
		d.res.gids[idx] = prev
		return nil, fail(errAddrInUse, "GID %s at index %d: %v", g.String(), idx, err)
	}
	d.log.Info("GID bound", "index", idx, "gid", g.String())
	if mac, ok := macFromLinkLocal(g.GID); ok && mac != d.wire.MAC {
		// The driver binds the port's default GID from the paired vmxnet3's
		// MAC: that is the MAC its RoCE frames carry.
		d.wire.MAC = mac
		d.log.Info("source MAC from the default GID", "mac", net.HardwareAddr(mac[:]).String())
	}
	return nil, nil
}

func (d *Device) cmdDestroyBind(req *abi.CmdDestroyBind) (abi.Response, *cmdErr) {
	idx := req.Index
	if idx >= d.caps.GIDTblLen {
		return nil, fail(errInval, "pvrdma_cmd_destroy_bind.index=%d >= gid_tbl_len=%d", idx, d.caps.GIDTblLen)
	}
	if !d.res.gids[idx].Valid {
		return nil, fail(errInval, "pvrdma_cmd_destroy_bind.index=%d: not bound", idx).as(hca.FindingHandle)
	}
	d.res.gids[idx] = GIDEntry{}
	if err := d.announce(); err != nil {
		// Fewer addresses than the port owns: the fabric cannot refuse.
		d.log.Error("fabric refused the GID table after DESTROY_BIND", "err", err)
	}
	return nil, nil
}

// macFromLinkLocal inverts the EUI-64 of a link-local GID fe80::/64
// (xx:xx:xx:ff:fe:xx:xx:xx with the universal/local bit flipped).
func macFromLinkLocal(g [16]byte) ([6]byte, bool) {
	if g[0] != 0xfe || g[1] != 0x80 || g[2]|g[3]|g[4]|g[5]|g[6]|g[7] != 0 || g[11] != 0xff || g[12] != 0xfe {
		return [6]byte{}, false
	}
	return [6]byte{g[8] ^ 2, g[9], g[10], g[13], g[14], g[15]}, true
}

// announce tells the fabric which addresses (GIDs) this HCA owns: those of
// the valid GID table entries. The fabric refuses an address another port
// owns, all or nothing, so what the port owns stays the table's addresses.
func (d *Device) announce() error {
	d.gidGen++ // every change of the GID table is announced: cached paths are stale
	var addrs []netip.Addr
	for _, g := range d.res.gids {
		if g.Valid {
			addrs = append(addrs, gidAddr(g.GID))
		}
	}
	return d.wire.SetAddrs(addrs)
}

// --- user contexts ---------------------------------------------------------------

func (d *Device) cmdCreateUC(req *abi.CmdCreateUC) (abi.Response, *cmdErr) {
	pfn := req.PFN64
	// BAR2 is naturally aligned to its size, so the low bits of the PFN are
	// the UAR index; the high bits must name BAR2 where the guest put it.
	idx := uint32(pfn & uint64(d.caps.MaxUAR-1))
	if bar := d.uarBase(); bar != 0 && pfn-uint64(idx) != bar>>12 {
		return nil, fail(errInval, "pvrdma_cmd_create_uc.pfn=%#x: not a page of the UAR BAR at %#x", pfn, bar)
	}
	if idx == 0 {
		return nil, fail(errInval, "pvrdma_cmd_create_uc.pfn=%#x: the kernel's UAR page 0", pfn)
	}
	for _, h := range d.res.uc.handles() {
		if d.res.uc.get(h).uar == idx {
			return nil, fail(errBusy, "pvrdma_cmd_create_uc.pfn: UAR page %d already has a context", idx)
		}
	}
	h, e := d.res.uc.add(&ucontext{uar: idx})
	if e != nil {
		return nil, e
	}
	return &abi.CmdCreateUCResp{CtxHandle: h}, nil
}

// uarBase is BAR2's guest-physical base as the guest last programmed it.
func (d *Device) uarBase() uint64 {
	var b [4]byte
	d.pci.Read(0x18, b[:])
	return uint64(binary.LittleEndian.Uint32(b[:]) &^ 0xF)
}

func (d *Device) cmdDestroyUC(req *abi.CmdDestroyUC) (abi.Response, *cmdErr) {
	h := req.CtxHandle
	if d.res.uc.get(h) == nil {
		return nil, fail(errInval, "ctx_handle=%d: no such context", h).as(hca.FindingHandle)
	}
	d.destroyContextObjects(h)
	d.res.uc.del(h)
	return nil, nil
}
