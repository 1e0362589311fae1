package ib

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/hcaemu/hcaemu/emu/roce"
)

// ICRC returns the invariant CRC of a native IB packet (IBA 7.8.1). pkt is
// the packet as on the wire, LRH through VCRC: the CRC covers the LRH (and
// GRH) through the last payload/pad byte, not the ICRC and VCRC fields.
// The variant fields are replaced by ones in a private copy:
//
//   - local packet (LNH = IBA local): the LRH's VL; the BTH's byte 4
//     (FECN, BECN and the reserved bits, "Resv8a");
//   - global packet (LNH = IBA global): the whole LRH; the GRH's traffic
//     class, flow label and hop limit; the BTH's byte 4.
//
// The CRC is RoCE's (the IEEE CRC-32, the same register; RoCEv2 is the
// global case with the IP header in the GRH's place and the UDP header
// added), and is carried little-endian. pkt must be long enough for its
// headers (Parse and Build make sure); ICRC never panics: it returns 0,
// ErrTooShort otherwise. It does not allocate.
func ICRC(pkt []byte) (uint32, error) {
	hdr, n, ok := icrcHeaders(pkt)
	if !ok {
		return 0, ErrTooShort
	}
	c := roce.UpdateCRC32(0, hdr[:n])
	// The payload is the caller's (no stack copy to keep off the heap):
	// hash/crc32, which uses the CPU's carry-less multiply where there is
	// one, several times faster than a table.
	return crc32.Update(c, crc32.IEEETable, pkt[n:len(pkt)-roce.ICRCSize-VCRCSize]), nil
}

// icrcHeaders returns the masked copy of pkt's LRH, GRH and BTH, and their
// length.
func icrcHeaders(pkt []byte) (hdr [LRHSize + GRHSize + roce.BTHSize]byte, n int, ok bool) {
	if len(pkt) < LRHSize {
		return hdr, 0, false
	}
	global := LRH(pkt).LNH() == LNHIBAGlobal
	n = LRHSize + roce.BTHSize
	if global {
		n += GRHSize
	}
	if len(pkt) < n+roce.ICRCSize+VCRCSize {
		return hdr, 0, false
	}
	copy(hdr[:], pkt[:n])
	if global {
		for i := range LRHSize {
			hdr[i] = 0xFF
		}
		g := hdr[LRHSize:]
		g[0] |= 0x0F                        // traffic class, high nibble
		g[1], g[2], g[3] = 0xFF, 0xFF, 0xFF // traffic class, flow label
		g[7] = 0xFF                         // hop limit
	} else {
		hdr[0] |= 0xF0 // VL
	}
	hdr[n-roce.BTHSize+4] = 0xFF // BTH FECN, BECN, Resv8a
	return hdr, n, true
}

// PutICRC computes the ICRC of pkt (LRH through VCRC) and stores it in its
// field, the four bytes before the VCRC.
func PutICRC(pkt []byte) error {
	c, err := ICRC(pkt)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-VCRCSize-roce.ICRCSize:], c)
	return nil
}

// vcrcPoly is the VCRC's polynomial x^16 + x^12 + x^3 + x + 1 (0x100B),
// bit-reversed for the LSB-first register the ICRC uses too.
const vcrcPoly = 0xD008

// vcrcTables are the VCRC's slicing-by-8 tables: [0] is the byte-at-a-time
// table (the register after 8 shifts of a byte), [k] the same byte
// followed by k zero bytes.
var vcrcTables = func() (t [8][256]uint16) {
	for i := range t[0] {
		c := uint16(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ vcrcPoly
			} else {
				c >>= 1
			}
		}
		t[0][i] = c
	}
	for k := 1; k < 8; k++ {
		for i := range t[k] {
			c := t[k-1][i]
			t[k][i] = c>>8 ^ t[0][byte(c)]
		}
	}
	return t
}()

// vcrcUpdate runs the VCRC's register over p, eight bytes at a time (the
// register is 16 bits: the first two bytes of each eight meet it).
func vcrcUpdate(reg uint16, p []byte) uint16 {
	t := &vcrcTables
	for len(p) >= 8 {
		r := reg ^ binary.LittleEndian.Uint16(p)
		reg = t[7][byte(r)] ^ t[6][r>>8] ^ t[5][p[2]] ^ t[4][p[3]] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	for _, c := range p {
		reg = t[0][byte(reg)^c] ^ reg>>8
	}
	return reg
}

// VCRC returns the variant CRC of a native IB packet (IBA 7.8.2): CRC-16
// with polynomial 0x100B over every byte of pkt (LRH through ICRC) but its
// last two, the VCRC field itself; register seeded with 0xFFFF, processed
// LSB first like the ICRC, complemented (the parameters Endace's DAG
// capture library uses for the IB VCRC), carried little-endian like the
// ICRC (no public packet was found to confirm the byte order; tshark shows
// the field but does not check it). It is
// recomputed on every link (VL may change), so it covers the variant
// fields too. It returns 0, ErrTooShort for a packet shorter than an LRH
// and a VCRC.
func VCRC(pkt []byte) (uint16, error) {
	if len(pkt) < LRHSize+VCRCSize {
		return 0, ErrTooShort
	}
	return ^vcrcUpdate(0xFFFF, pkt[:len(pkt)-VCRCSize]), nil
}

// PutVCRC computes the VCRC of pkt and stores it in its last two bytes.
func PutVCRC(pkt []byte) error {
	c, err := VCRC(pkt)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint16(pkt[len(pkt)-VCRCSize:], c)
	return nil
}
