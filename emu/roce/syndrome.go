package roce

import (
	"strconv"
	"time"
)

// Syndrome is the AETH syndrome byte (spec §1.8): bit 7 is 0, bits 6–5 the
// type, bits 4–0 the credit code, RNR timer code or NAK code.
type Syndrome uint8

// SyndromeType is the type selected by syndrome bits 7–5.
type SyndromeType uint8

// Syndrome types.
const (
	SyndromeACK      SyndromeType = iota // 0 00 xxxxx
	SyndromeRNRNAK                       // 0 01 xxxxx
	SyndromeReserved                     // 0 10 xxxxx, or bit 7 set
	SyndromeNAK                          // 0 11 xxxxx
)

func (t SyndromeType) String() string {
	switch t {
	case SyndromeACK:
		return "ACK"
	case SyndromeRNRNAK:
		return "RNR NAK"
	case SyndromeNAK:
		return "NAK"
	}
	return "reserved"
}

// NAKCode is the 5-bit error code of a NAK syndrome.
type NAKCode uint8

// NAK codes (spec §1.8).
const (
	NAKPSNSequenceError     NAKCode = 0
	NAKInvalidRequest       NAKCode = 1
	NAKRemoteAccessError    NAKCode = 2
	NAKRemoteOperationalErr NAKCode = 3
	NAKInvalidRDRequest     NAKCode = 4
)

func (c NAKCode) String() string {
	switch c {
	case NAKPSNSequenceError:
		return "PSN sequence error"
	case NAKInvalidRequest:
		return "invalid request"
	case NAKRemoteAccessError:
		return "remote access error"
	case NAKRemoteOperationalErr:
		return "remote operational error"
	case NAKInvalidRDRequest:
		return "invalid RD request"
	}
	return "NAK code " + strconv.Itoa(int(c))
}

// CreditInvalid is the ACK credit code meaning "invalid / no flow control";
// our responder sends it in every ACK (spec §1.8).
const CreditInvalid = 31

// Frequently used syndromes.
const (
	SyndromeACKNoCredit       Syndrome = 0x1F // ACK, credits invalid (what rxe and we send)
	SyndromePSNSequenceError  Syndrome = 0x60
	SyndromeInvalidRequest    Syndrome = 0x61
	SyndromeRemoteAccess      Syndrome = 0x62
	SyndromeRemoteOperational Syndrome = 0x63
	SyndromeInvalidRDRequest  Syndrome = 0x64
)

// ACKSyndrome returns the ACK syndrome with credit code code (0..31).
func ACKSyndrome(code uint8) Syndrome { return Syndrome(code & 0x1F) }

// RNRNAKSyndrome returns the RNR NAK syndrome with RNR timer code code (0..31).
func RNRNAKSyndrome(code uint8) Syndrome { return Syndrome(0x20 | code&0x1F) }

// NAKSyndrome returns the NAK syndrome with error code c.
func NAKSyndrome(c NAKCode) Syndrome { return Syndrome(0x60 | uint8(c)&0x1F) }

// Type returns the syndrome type; a syndrome with bit 7 set is reserved.
func (s Syndrome) Type() SyndromeType {
	if s&0x80 != 0 {
		return SyndromeReserved
	}
	return SyndromeType(s >> 5)
}

// Code returns bits 4–0: credit code, RNR timer code or NAK code.
func (s Syndrome) Code() uint8 { return uint8(s) & 0x1F }

// IsACK reports whether s is a positive acknowledgement.
func (s Syndrome) IsACK() bool { return s.Type() == SyndromeACK }

// IsRNRNAK reports whether s is an RNR NAK.
func (s Syndrome) IsRNRNAK() bool { return s.Type() == SyndromeRNRNAK }

// IsNAK reports whether s is a NAK (not an RNR NAK).
func (s Syndrome) IsNAK() bool { return s.Type() == SyndromeNAK }

// CreditCode returns the credit code of an ACK syndrome.
func (s Syndrome) CreditCode() uint8 { return s.Code() }

// RNRTimerCode returns the timer code of an RNR NAK syndrome.
func (s Syndrome) RNRTimerCode() uint8 { return s.Code() }

// NAKCode returns the error code of a NAK syndrome.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.Code()) }

func (s Syndrome) String() string {
	switch s.Type() {
	case SyndromeACK:
		if s.Code() == CreditInvalid {
			return "ACK(credits invalid)"
		}
		n, _ := CreditCount(s.Code())
		return "ACK(credits " + strconv.Itoa(n) + ")"
	case SyndromeRNRNAK:
		return "RNR NAK(" + RNRTimer(s.Code()).String() + ")"
	case SyndromeNAK:
		return "NAK(" + s.NAKCode().String() + ")"
	}
	return "Syndrome(0x" + strconv.FormatUint(uint64(s), 16) + ")"
}

var creditTable = [31]uint16{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// CreditCount returns the number of receive WQEs advertised by ACK credit
// code code (spec §1.8). ok is false for code 31 ("invalid", no flow
// control) and for codes above 31.
func CreditCount(code uint8) (credits int, ok bool) {
	if int(code) >= len(creditTable) {
		return 0, false
	}
	return int(creditTable[code]), true
}

// rnrTable holds the RNR timer durations in units of 10 µs (spec §3.7).
var rnrTable = [32]uint32{
	65536, 1, 2, 3, 4, 6, 8, 12,
	16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072,
	4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
}

// RNRTimer returns the duration encoded by a 5-bit RNR timer code (the
// responder's min_rnr_timer, and bits 4–0 of an RNR NAK syndrome; spec §3.7).
// Code 0 is the longest value, 655.36 ms. Bits above 4 are ignored.
func RNRTimer(code uint8) time.Duration {
	return time.Duration(rnrTable[code&0x1F]) * 10 * time.Microsecond
}

// RNRTimerCode returns the code of the shortest RNR timer that is at least
// d; durations above 655.36 ms give code 0 (the longest).
func RNRTimerCode(d time.Duration) uint8 {
	for c := uint8(1); c < 32; c++ {
		if RNRTimer(c) >= d {
			return c
		}
	}
	return 0
}

// LocalACKTimeout returns the retransmission timer period for the 5-bit QP
// timeout attribute: 4.096 µs × 2^timeout (spec §3.6). Timeout 0 means
// "never time out" and gives 0. Bits above 4 are ignored.
func LocalACKTimeout(timeout uint8) time.Duration {
	timeout &= 0x1F
	if timeout == 0 {
		return 0
	}
	return 4096 * time.Nanosecond << timeout
}
