package mlx5

import (
	"encoding/binary"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mr"
	"github.com/hcaemu/hcaemu/emu/transport"
)

// Receives from a shared receive queue (spec §7.6): a QP whose context
// names an RMP (rq_type SRQ, srqn_rmpn_xrqn) takes its receive WQEs from
// the RMP's linked list instead of an RQ of its own, and an XRC target
// QP from the XRC SRQ the packet's XRCETH names (xrc.go). The device
// keeps each SRQ's head (the WQE index it consumes next, 0 at creation)
// and how many it consumed; the doorbell record's 32-bit word holds the
// count the provider posted (mlx5_post_srq_recv: srq->counter, 16 bits).
// A WQE is consumed by moving the head to its next_wqe_index, read when
// it is taken. The completion carries the WQE index as its wqe_counter;
// an RMP's goes to the QP's receive CQ with the QP's user index, an XRC
// SRQ's to the SRQ's CQ with the SRQ's user index (§7.8).

// srqState is the device's side of an SRQ's linked list.
type srqState struct {
	head     uint16 // the WQE index consumed next
	consumed uint16 // WQEs consumed (against the record's posted count)
	gen      uint32 // bumped at each consumption: a peek of an older one is stale
}

// srqEnv is what a QP's env keeps of its SRQ receives.
type srqEnv struct {
	xrcSRQN  uint32 // XRC target: the XRC SRQ of the packet being received
	peekSRQN uint32 // the SRQ of the WQE peeked
	peekObj  *srq   // the same SRQ object (not one made since with its number)
	peekGen  uint32 // its generation then
	srqNext  uint16 // the peeked WQE's next_wqe_index
	recvSRQN uint32 // the SRQ of the WQE consumed last (its completion's)
}

// xrcTarget reports whether q is an XRC target QP (an XRC QP without a
// send queue: the kernel's, for ibv_open_qp).
func (q *qp) xrcTarget() bool { return q.st == ifc.QPStXRC && !q.hasSQ }

// usesSRQ reports whether the QP's receives come from an SRQ.
func (env *qpEnv) usesSRQ() bool {
	q := env.q
	return q.xrcTarget() || ifc.QPCRQType.Get(q.ctx[:]) == ifc.RQTypeSRQ
}

// recvSRQ is the SRQ a QP's next receive comes from and its number; nil
// when there is none of the right kind: an XRC target's must be an XRC
// SRQ of its XRC domain, another QP's an RMP.
func (env *qpEnv) recvSRQ() (*srq, uint32) {
	q := env.q
	n := q.srqn
	if q.xrcTarget() {
		n = env.xrcSRQN // the XRCETH of the packet being received (xrc.go)
	}
	s := env.d.fn.obj.srqs.Get(n)
	if s == nil || s.xrc != q.xrcTarget() || s.xrc && s.xrcd != q.xrcdn {
		return nil, n
	}
	return s, n
}

// peekSRQ is PeekRecv from the QP's SRQ: the WQE at its head if the
// provider posted one the device has not consumed. A peek stays valid
// until the SRQ consumes a WQE (for any QP).
func (env *qpEnv) peekSRQ() (transport.RecvWR, transport.Status, bool) {
	d := env.d
	s, n := env.recvSRQ()
	if s == nil {
		return transport.RecvWR{}, 0, false
	}
	if env.rqPeeked && env.peekObj == s && env.peekGen == s.st.gen {
		return env.recv, env.recvSt, true
	}
	env.rqPeeked = false
	var rec [4]byte
	if err := d.readGuest(rec[:], s.dbr); err != nil {
		return transport.RecvWR{}, 0, false
	}
	posted := uint16(binary.BigEndian.Uint32(rec[:]))
	size := uint16(1) << s.logSize
	if posted == s.st.consumed {
		return transport.RecvWR{}, 0, false
	}
	if uint16(posted-s.st.consumed) > size {
		d.find(hca.FindingRingIndex, "no receive", "srq %#x posted counter %#x: %d WQEs past the consumer %#x, SRQ of %d",
			n, posted, posted-s.st.consumed, s.st.consumed, size)
		return transport.RecvWR{}, 0, false
	}
	stride := uint64(1) << s.logStride
	if uint64(cap(env.rwqe)) < stride {
		env.rwqe = make([]byte, stride)
	}
	b := env.rwqe[:stride]
	idx := s.st.head & (size - 1)
	env.recv, env.recvSt = transport.RecvWR{ID: uint64(idx)}, transport.StatusSuccess
	env.srqNext = 0
	if err := d.readBuf(s.pas, s.pageShift, s.pageOffset, uint64(idx)*stride, b); err != nil {
		env.recvSt = transport.StatusLocProtErr
	} else if err := env.rw.Decode(b, true); err != nil {
		env.recvSt = transport.StatusLocLenErr
	} else {
		env.srqNext = env.rw.Next.NextWQEIndex & (size - 1)
		env.sges = env.sges[:0]
		for _, g := range env.rw.Data {
			env.sges = append(env.sges, mr.SGE{Addr: g.Addr, Length: g.ByteCount, LKey: g.LKey})
		}
		// The scatter list's keys are the SRQ's PD's (the QP's may differ).
		segs, bytes, err := env.mem.SegsInto(env.recvSegs[:0], s.pd, env.sges, true)
		env.recvSegs, env.recv.Cap, env.recvSt = segs, bytes, transport.SegsStatus(err)
		env.recv.Segs = env.recvSegs
	}
	env.rqPeeked, env.peekSRQN, env.peekObj, env.peekGen = true, n, s, s.st.gen
	return env.recv, env.recvSt, true
}

// popSRQ consumes the WQE peekSRQ returned, if the SRQ did not consume
// one since (a stale peek consumes nothing).
func (env *qpEnv) popSRQ() {
	env.rqPeeked = false
	env.recvSRQN = env.peekSRQN
	s := env.d.fn.obj.srqs.Get(env.peekSRQN)
	if s == nil || s != env.peekObj || s.st.gen != env.peekGen {
		return
	}
	s.st.head = env.srqNext
	s.st.consumed++
	s.st.gen++
	env.d.srqConsumed(s, env.peekSRQN) // srqlimit.go
}

// recvCompletion is where a receive completion goes and the user index
// it carries: an XRC SRQ's CQ and user index for a WQE of an XRC SRQ,
// the QP's receive CQ and user index otherwise.
func (env *qpEnv) recvCompletion() (cqn, userIndex uint32) {
	q := env.q
	if env.usesSRQ() {
		if s := env.d.fn.obj.srqs.Get(env.recvSRQN); s != nil && s.xrc {
			return s.cqn, s.userIndex
		}
	}
	return q.rcvCQ, q.userIndex
}
