// Package mad models InfiniBand management datagrams (IBA chapters 13–15),
// the 256-byte MADs that UD packets carry to QP0 (subnet management) and
// QP1 (general services, here the subnet administrator):
//
//   - Header, the common MAD header (IBA 13.4.2; Linux ib_mad.h
//     struct ib_mad_hdr);
//   - SMP, the subnet management packet in its LID-routed and
//     directed-route layouts, data at byte 64 (ib_smi.h struct ib_smp);
//   - SAMAD, the subnet administration MAD: the RMPP header, SM_Key,
//     attribute offset and component mask, data at byte 56 (ib_sa.h
//     struct ib_sa_mad);
//   - typed encoders and decoders of the attributes a device's SMA and the
//     fabric's SA speak: NodeInfo, NodeDescription, PortInfo, GUIDInfo,
//     P_KeyTable, ClassPortInfo, PathRecord and MCMemberRecord, with the
//     IBA field offsets (the ones sa_query.c's tables and the mlx5 driver
//     read);
//   - the Subnet Management Agent of one HCA port (PortState.AnswerSMP):
//     what a device model's MAD_IFC handler answers for the SMPs the
//     driver sends it.
//
// Every decoder takes untrusted bytes: it checks the length, never panics,
// and keeps every bit it does not interpret as a field so that encoding a
// decoded value gives the same bytes back (reserved bits aside, which
// encoders write as zero).
package mad

import (
	"encoding/binary"
	"errors"
)

// Size is the size of every MAD this package handles (IBA 13.4.1).
const Size = 256

// HeaderSize is the size of the common MAD header.
const HeaderSize = 24

// BaseVersion is the only MAD base version (IBA 13.4.2).
const BaseVersion = 1

// Management classes.
const (
	ClassSubnLID   = 0x01 // subnet management, LID routed
	ClassSubnAdm   = 0x03 // subnet administration
	ClassPerf      = 0x04 // performance management
	ClassCM        = 0x07 // communication management
	ClassSubnDR    = 0x81 // subnet management, directed route
	SMPVersion     = 1    // class version of the SM classes
	SAClassVersion = 2    // class version of the SubnAdm class
)

// Methods (IBA 13.4.5, 15.2.2). A response is its request | MethodResp.
const (
	MethodGet          = 0x01
	MethodSet          = 0x02
	MethodSend         = 0x03
	MethodTrap         = 0x05
	MethodReport       = 0x06
	MethodTrapRepress  = 0x07
	MethodGetTable     = 0x12
	MethodDelete       = 0x15
	MethodResp         = 0x80
	MethodGetResp      = MethodGet | MethodResp // 0x81, also the answer to a Set
	MethodGetTableResp = MethodGetTable | MethodResp
	MethodDeleteResp   = MethodDelete | MethodResp
)

// Common MAD status values (IBA 13.4.7, bits 4–2 of Status).
const (
	StatusOK                = 0x0000
	StatusBusy              = 0x0001
	StatusBadVersion        = 0x0004 // base or class version not supported
	StatusMethodUnsupported = 0x0008
	StatusAttrUnsupported   = 0x000C // method/attribute combination not supported
	StatusInvalidField      = 0x001C // invalid value in the attribute or modifier
)

// Subnet administration status values (IBA 15.2.1.1: class-specific,
// bits 15–8 of Status).
const (
	SAStatusNoResources      = 0x0100
	SAStatusReqInvalid       = 0x0200
	SAStatusNoRecords        = 0x0300
	SAStatusTooManyRecords   = 0x0400
	SAStatusInvalidGID       = 0x0500
	SAStatusInsufficientComp = 0x0600
	SAStatusReqDenied        = 0x0700
)

// Errors of the decoders and encoders.
var (
	ErrSize        = errors.New("mad: not a 256-byte MAD")
	ErrShortBuffer = errors.New("mad: buffer too small")
	ErrClass       = errors.New("mad: wrong management class")
	ErrFieldRange  = errors.New("mad: field value out of range")
)

// Header is the common MAD header (24 bytes).
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TID           uint64
	AttrID        uint16
	Resv          uint16 // reserved (kept so that a decoded header encodes back to its bytes)
	AttrMod       uint32
}

// IsResponse reports whether h's method is a response (bit 7).
func (h *Header) IsResponse() bool { return h.Method&MethodResp != 0 }

// DecodeHeader decodes the first 24 bytes of b.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrShortBuffer
	}
	be := binary.BigEndian
	return Header{BaseVersion: b[0], MgmtClass: b[1], ClassVersion: b[2], Method: b[3],
		Status: be.Uint16(b[4:]), ClassSpecific: be.Uint16(b[6:]), TID: be.Uint64(b[8:]),
		AttrID: be.Uint16(b[16:]), Resv: be.Uint16(b[18:]), AttrMod: be.Uint32(b[20:])}, nil
}

// Encode writes h into the first 24 bytes of b.
func (h *Header) Encode(b []byte) error {
	if len(b) < HeaderSize {
		return ErrShortBuffer
	}
	be := binary.BigEndian
	b[0], b[1], b[2], b[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	be.PutUint16(b[4:], h.Status)
	be.PutUint16(b[6:], h.ClassSpecific)
	be.PutUint64(b[8:], h.TID)
	be.PutUint16(b[16:], h.AttrID)
	be.PutUint16(b[18:], h.Resv)
	be.PutUint32(b[20:], h.AttrMod)
	return nil
}
