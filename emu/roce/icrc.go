package roce

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// Errors returned by the ICRC functions.
var (
	ErrBadIPHeader = errors.New("roce: IP header is neither a 20-byte IPv4 nor a 40-byte IPv6 header")
	ErrBadICRC     = errors.New("roce: ICRC mismatch")
)

// icrcSeed is the reflected CRC-32 register after eight 0xFF bytes (the
// masked LRH) starting from 0xFFFFFFFF; rxe's 0xDEBB20E3 (spec §1.10).
const icrcSeed = 0xDEBB20E3

// crcTable is the reflected IEEE table for the small masked header prefix.
// The prefix is CRC'd by hand so that its stack copy does not escape into
// hash/crc32's indirect calls (which would make the ICRC allocate).
var crcTable = crc32.MakeTable(crc32.IEEE)

var crcSlicing8 = func() (t [8][256]uint32) {
	t[0] = *crcTable
	for i := 0; i < 256; i++ {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][c&0xFF] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

func crcUpdateRaw(reg uint32, p []byte) uint32 {
	t := &crcSlicing8
	for len(p) >= 8 {
		reg ^= binary.LittleEndian.Uint32(p)
		reg = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][reg>>24] ^ t[5][reg>>16&0xFF] ^ t[6][reg>>8&0xFF] ^ t[7][reg&0xFF]
		p = p[8:]
	}
	for _, c := range p {
		reg = crcTable[byte(reg)^c] ^ reg>>8
	}
	return reg
}

// ICRC returns the invariant CRC (spec §1.10) of a RoCEv2 packet.
//
// ip is the IPv4 header (exactly 20 bytes, IHL 5) or the IPv6 header
// (exactly 40 bytes), told apart by the version nibble; udp is the 8-byte UDP
// header; ib is the transport packet, BTH through ICRC: its last four bytes
// (the ICRC field itself) are not covered. The masked fields of spec §1.10
// are replaced by ones in a private copy; nothing is modified.
//
// The ICRC is carried on the wire as the little-endian encoding of the
// returned value. ICRC does not allocate.
func ICRC(ip, udp, ib []byte) (uint32, error) {
	var hdr [40 + 8 + BTHSize]byte
	n := len(ip)
	switch {
	case n == 20 && ip[0] == 0x45:
		copy(hdr[:], ip)
		hdr[1] = 0xFF                 // TOS
		hdr[8] = 0xFF                 // TTL
		hdr[10], hdr[11] = 0xFF, 0xFF // header checksum
	case n == 40 && ip[0]>>4 == 6:
		copy(hdr[:], ip)
		hdr[0] |= 0x0F                            // traffic class (high nibble)
		hdr[1], hdr[2], hdr[3] = 0xFF, 0xFF, 0xFF // traffic class, flow label
		hdr[7] = 0xFF                             // hop limit
	default:
		return 0, ErrBadIPHeader
	}
	if len(udp) != UDPHeaderSize {
		return 0, ErrTooShort
	}
	if len(ib) < BTHSize+ICRCSize {
		return 0, ErrTooShort
	}
	copy(hdr[n:], udp)
	hdr[n+6], hdr[n+7] = 0xFF, 0xFF // UDP checksum
	n += UDPHeaderSize
	copy(hdr[n:], ib[:BTHSize])
	hdr[n+4] = 0xFF // FECN, BECN, reserved
	n += BTHSize
	reg := crcUpdateRaw(icrcSeed, hdr[:n])
	// crc32.Update takes and returns the complemented register.
	return crc32.Update(^reg, crc32.IEEETable, ib[BTHSize:len(ib)-ICRCSize]), nil
}

// PutICRC computes the ICRC of the packet and stores it in the last four
// bytes of ib.
func PutICRC(ip, udp, ib []byte) error {
	c, err := ICRC(ip, udp, ib)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(ib[len(ib)-ICRCSize:], c)
	return nil
}

// VerifyICRC recomputes the ICRC and compares it with the last four bytes of
// ib; it returns ErrBadICRC on mismatch.
func VerifyICRC(ip, udp, ib []byte) error {
	c, err := ICRC(ip, udp, ib)
	if err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(ib[len(ib)-ICRCSize:]) != c {
		return ErrBadICRC
	}
	return nil
}

// UpdateCRC32 continues an IEEE CRC-32 (the ICRC's CRC) over p, as
// hash/crc32.Update with the IEEE table does: crc is the CRC of the bytes
// so far (0 before the first). Unlike crc32.Update it keeps p off the heap,
// so a caller's stack copy of masked headers does not make it allocate.
// Native InfiniBand's ICRC (package ib), with its own masks, is built on it.
func UpdateCRC32(crc uint32, p []byte) uint32 { return ^crcUpdateRaw(^crc, p) }
