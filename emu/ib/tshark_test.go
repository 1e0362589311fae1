package ib_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/ibtest"
)

// TestTshark writes the sample packets (local and global, RC and UD, a MAD
// to QP1, a multicast) in pcap link type 252 with the exported-PDU
// dissector "infiniband" (shared/spec/mlx5.md §5.9) and checks that tshark
// decodes each as LRH (and GRH) and BTH with the fields Build wrote, and
// shows the ICRC and VCRC it carries.
func TestTshark(t *testing.T) {
	var pkts [][]byte
	var want []string
	for _, f := range ib.SamplePackets() {
		pkt, err := ib.Build(make([]byte, 8192), &f)
		if err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, pkt)
		n := len(pkt)
		line := []string{fmt.Sprintf("0x%02x", f.LRH.VL), fmt.Sprint(f.LRH.SL), fmt.Sprint(f.LRH.DLID), fmt.Sprint(f.LRH.SLID),
			fmt.Sprint((n - 2) / 4), fmt.Sprint(int(f.Transport.BTH.Opcode)),
			fmt.Sprintf("0x%06x", f.Transport.BTH.DestQP), fmt.Sprint(f.Transport.BTH.PSN),
			fmt.Sprint(f.Transport.BTH.PKey), "", "", "",
			"0x" + hex.EncodeToString(pkt[n-6:n-2]), "0x" + hex.EncodeToString(pkt[n-2:])}
		if f.GRH != nil {
			line[9], line[10] = gidString(f.GRH.DGID), fmt.Sprint(n-8-40-2)
			line[11] = fmt.Sprintf("0x%016x", f.Transport.DETH.QKey)
		}
		want = append(want, strings.Join(line, ","))
	}
	got := ibtest.Tshark(t, pkts, ",", "infiniband.lrh.vl", "infiniband.lrh.sl", "infiniband.lrh.dlid",
		"infiniband.lrh.slid", "infiniband.lrh.pktlen", "infiniband.bth.opcode", "infiniband.bth.destqp",
		"infiniband.bth.psn", "infiniband.bth.p_key", "infiniband.grh.dgid", "infiniband.grh.paylen",
		"infiniband.deth.q_key", "infiniband.invariant.crc", "infiniband.variant.crc")
	ibtest.Compare(t, got, want)
}

// gidString is a GID as tshark prints it (IPv6 notation).
func gidString(g ib.GID) string {
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, fmt.Sprintf("%x", uint16(g[i])<<8|uint16(g[i+1])))
	}
	s := strings.Join(parts, ":")
	// tshark compresses the longest run of zero groups.
	for _, z := range []string{":0:0:0:0:0:0:", ":0:0:0:0:0:", ":0:0:0:0:", ":0:0:0:", ":0:0:"} {
		if strings.Contains(s, z) {
			return strings.Replace(s, z, "::", 1)
		}
	}
	return s
}
