// Package roce models the RoCEv2 wire format used by the emulated HCA: the
// InfiniBand transport headers carried in UDP (destination port 4791) over
// IPv4 or IPv6, as specified in shared/spec/rocev2.md.
//
// It provides
//
//   - header views in the style of gVisor's pkg/tcpip/header: BTH, RETH, AETH,
//     AtomicETH, AtomicAckETH, ImmDt, IETH, DETH and FETH are []byte types
//     with getters, setters and an Encode(*Fields) method; none of them
//     allocates or copies;
//   - the opcode table of spec §2 (Opcode, OpcodeInfo), saying which extended
//     headers follow the BTH and what payload an opcode may carry;
//   - Parse, a strict, panic-free decoder of an IB transport packet (BTH
//     through ICRC), and Build, its inverse;
//   - AETH syndrome helpers (ACK credits, RNR NAK timer codes, NAK codes), the
//     RNR timer table and the local ACK timeout formula;
//   - 24-bit PSN arithmetic (PSNAdd, PSNDiff, ClassifyPSN);
//   - the ICRC of spec §1.10 (ICRC, PutICRC, VerifyICRC) for IPv4 and IPv6;
//   - Ethernet II + IPv4/IPv6 + UDP framing (Frame) and its inverse (Unframe),
//     plus the UDP source-port recipes of spec §1.5.
//
// Everything on the packet path is allocation-free: callers supply the
// buffers (the fabric's frame pool, see package fabric). Capture (the pcap
// writer) belongs to the fabric too. Nothing here knows about queue pairs;
// validation that needs QP state (PMTU, P_Key table, expected PSN, QPN existence) belongs to the
// transport engines, which get the helpers they need from this package
// (for example CheckPayloadLen with a PMTU).
package roce
