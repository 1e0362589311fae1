package roce

// PSNs are 24-bit sequence numbers; all arithmetic is modulo 2^24 (spec
// conventions, §3.5, §4.1).

// PSNAdd returns (psn + n) mod 2^24; n may be negative.
func PSNAdd(psn uint32, n int) uint32 { return (psn + uint32(n)) & Mask24 }

// PSNDiff returns the signed 24-bit distance a − b, in [−2^23, 2^23). It is
// the spec's "((a − b) << 8) interpreted as int32", shifted back.
func PSNDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }

// PSNBefore reports whether a precedes b (PSNDiff(a, b) < 0).
func PSNBefore(a, b uint32) bool { return PSNDiff(a, b) < 0 }

// PSNAfter reports whether a follows b (PSNDiff(a, b) > 0).
func PSNAfter(a, b uint32) bool { return PSNDiff(a, b) > 0 }

// PSNClass is the responder's classification of a request PSN (spec §4.1).
type PSNClass uint8

// PSN classes.
const (
	PSNExpected      PSNClass = iota // d = 0: new, in order
	PSNDuplicate                     // d < 0: up to 2^23 behind the expected PSN
	PSNOutOfSequence                 // d > 0: a packet was lost
)

func (c PSNClass) String() string {
	switch c {
	case PSNExpected:
		return "expected"
	case PSNDuplicate:
		return "duplicate"
	case PSNOutOfSequence:
		return "out of sequence"
	}
	return "PSNClass(?)"
}

// ClassifyPSN classifies request PSN psn against the expected PSN epsn. A
// distance of exactly 2^23 is classified as a duplicate.
func ClassifyPSN(psn, epsn uint32) PSNClass {
	switch d := PSNDiff(psn, epsn); {
	case d == 0:
		return PSNExpected
	case d < 0:
		return PSNDuplicate
	default:
		return PSNOutOfSequence
	}
}

// PSNInRange reports whether psn lies in the inclusive window [first, last]
// taken in sequence order, as used to match a duplicate READ against a
// responder resource (spec §4.6).
func PSNInRange(psn, first, last uint32) bool {
	return (psn-first)&Mask24 <= (last-first)&Mask24
}

// ReadPSNCount returns the number of PSNs an RDMA READ of length bytes at
// path MTU pmtu consumes: max(1, ⌈length / pmtu⌉) (spec §3.2). pmtu must be
// positive.
func ReadPSNCount(length uint32, pmtu int) uint32 {
	n := (uint64(length) + uint64(pmtu) - 1) / uint64(pmtu)
	if n == 0 {
		n = 1
	}
	return uint32(n)
}
