// Package ib models native InfiniBand on the wire, the link layer of an
// HCA port on an InfiniBand subnet (the mlx5 model's IB personality,
// shared/spec/mlx5.md §5): what IB adds around the transport headers that
// RoCE shares with it.
//
// It provides
//
//   - LRH, the 8-byte Local Route Header (VL, LVer, SL, LNH, DLID, PktLen,
//     SLID), and GRH, the 40-byte Global Route Header, as []byte views with
//     getters and an Encode(*Fields) method, in the style of package roce;
//   - ICRC, the invariant CRC of a native IB packet (IBA 7.8.1: the CRC-32
//     of RoCE, with the LRH's VL masked in a local packet, and the whole LRH
//     plus the GRH's traffic class, flow label and hop limit masked in a
//     global one), and VCRC, the variant CRC-16 over LRH through ICRC
//     (IBA 7.8.2);
//   - Build, which lays out a whole IB packet (LRH, optional GRH, the
//     transport packet of roce.PacketFields, ICRC, VCRC) from the same
//     fields the transports produce for RoCE, and Parse, its strict,
//     panic-free inverse, which checks every length (PktLen against the
//     bytes, the GRH's PayLen), LVer, LNH, the GRH's version and next
//     header, both CRCs and then the transport packet with roce.Parse.
//
// BTH onward is identical on IB and RoCE, so the transport engines are the
// same; only the framing differs. Package ib/mad holds the management
// datagrams carried in UD packets to QP0/QP1 (SMPs, SA MADs) and a device's
// Subnet Management Agent; package ib/subnet the subnet itself (ports by
// LID, the embedded SM and SA, multicast). Nothing here knows about queue
// pairs or device models.
package ib
