package subnet_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fabric/capture"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/ibtest"
	"github.com/hcaemu/hcaemu/emu/ib/mad"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// TestConcurrent: ports send unicast, multicast and SA requests, join and
// leave, while others attach and detach, all at once (run with -race);
// nothing is lost that a counter does not name, and no goroutine is left.
func TestConcurrent(t *testing.T) {
	checkGoroutines(t)
	s := subnet.New(subnet.Config{})
	const n, rounds = 6, 200
	hosts := make([]*host, n)
	for i := range hosts {
		hosts[i] = attach(t, s, fmt.Sprint("h", i), guidA+uint64(i))
	}
	var wg sync.WaitGroup
	sent := make([]int, n)
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bc := subnet.BroadcastMGID
			for r := range rounds {
				switch r % 4 {
				case 0:
					send(t, h, ud(h, uint16(2+(i+r)%n), nil, 0x99, 1, []byte("x")))
				case 1:
					send(t, h, ud(h, 0xC000, &bc, 0xFFFFFF, 0x0B1B, []byte("bc")))
				case 2:
					rec := mad.MCMemberRecord{MGID: bc, PortGID: h.GID(), PKey: 0xFFFF, JoinState: mad.JoinFullMember}
					method := []uint8{mad.MethodSet, mad.MethodDelete}[r/4%2]
					send(t, h, ud(h, subnet.SMLID, nil, 1, mad.GSIQKey, mcReq(method, ipoibBroadcastJoin, rec)))
				case 3:
					send(t, h, ud(h, subnet.SMLID, nil, 1, mad.GSIQKey,
						pathReq(hosts[(i+1)%n].GID(), h.GID(), mad.PRDGID|mad.PRSGID)))
				}
				sent[i]++
			}
		}()
	}
	wg.Add(1)
	go func() { // churn: a port comes and goes
		defer wg.Done()
		for r := range rounds {
			h := attach(t, s, "churn", 0x1000+uint64(r))
			send(t, h, ud(h, 2, nil, 0x99, 1, nil))
			h.Detach()
		}
	}()
	wg.Wait()
	if s.Spoofed.Load() != 0 || s.Malformed.Load() != 0 {
		t.Fatalf("spoofed %d malformed %d", s.Spoofed.Load(), s.Malformed.Load())
	}
	if got := s.SARequests.Load(); got != n*rounds/2 {
		t.Fatalf("SA answered %d, want %d", got, n*rounds/2)
	}
	if ports := s.Ports(); len(ports) != n+1 {
		t.Fatalf("ports after churn: %v", ports)
	}
}

// TestCaptureTshark: a capture on the subnet's link records the ports'
// packets and the SA's answers in link type 252, and tshark decodes them:
// LRH, BTH, DETH, the SA MAD and its PathRecord and MCMemberRecord.
func TestCaptureTshark(t *testing.T) {
	var buf bytes.Buffer
	w, err := capture.NewPcapWriter(&buf, capture.PcapOptions{Dissector: "infiniband"})
	if err != nil {
		t.Fatal(err)
	}
	s := subnet.New(subnet.Config{}, subnet.Capture(w))
	a, b := attach(t, s, "a", guidA), attach(t, s, "b", guidB)
	askSA(t, a, pathReq(b.GID(), a.GID(), mad.PRDGID|mad.PRSGID|mad.PRPKey))
	askSA(t, b, mcReq(mad.MethodSet, ipoibBroadcastJoin, mad.MCMemberRecord{MGID: subnet.BroadcastMGID,
		PortGID: b.GID(), PKey: 0xFFFF, JoinState: mad.JoinFullMember}))
	askSA(t, a, saReq(mad.MethodGet, mad.AttrClassPortInfo, 0, nil))
	send(t, a, ib.PacketFields{LRH: ib.LRHFields{DLID: b.LID(), SLID: a.LID()}, Transport: roce.PacketFields{
		BTH: roce.BTHFields{Opcode: roce.RCSendOnly, PKey: 0xFFFF, DestQP: 0x12, PSN: 7}, Payload: []byte("hi")}})
	spoof := ud(a, b.LID(), nil, 0x99, 1, nil)
	spoof.LRH.SLID = b.LID()
	send(t, a, spoof) // dropped at the port: never captured
	_ = w.Close()
	got := ibtest.TsharkPcap(t, buf.Bytes(), ",",
		"infiniband.lrh.slid", "infiniband.lrh.dlid", "infiniband.bth.opcode",
		"infiniband.bth.destqp", "infiniband.deth.srcqp", "infiniband.mad.method",
		"infiniband.mad.attributeid", "infiniband.pathrecord.dlid", "infiniband.pathrecord.slid",
		"infiniband.mcmemberrecord.mlid", "infiniband.mcmemberrecord.q_key",
		"infiniband.classportinfo.classversion", "infiniband.classportinfo.resptimevalue")
	want := []string{
		"2,1,100,0x000001,0x00000048,0x01,0x0035,0x0000,0x0000,,,,",     // PathRecord Get: by GIDs, no LIDs
		"1,2,100,0x000048,0x00000001,0x81,0x0035,0x0003,0x0002,,,,",     // GetResp: b's LID and a's
		"3,1,100,0x000001,0x00000048,0x02,0x0038,,,0x0000,0x00000000,,", // MCMemberRecord Set (join)
		"1,3,100,0x000048,0x00000001,0x81,0x0038,,,0xc000,0x00000b1b,,", // the broadcast group
		"2,1,100,0x000001,0x00000048,0x01,0x0001,,,,,0x00,0x00",         // ClassPortInfo Get
		"1,2,100,0x000048,0x00000001,0x81,0x0001,,,,,0x02,0x12",         // SA class version 2, RespTime 18
		"2,3,4,0x000012,,,,,,,,,",
	}
	ibtest.Compare(t, got, want)
}

// TestOwner: the name of the port that has a LID, the SM's included; none
// for a free LID, a multicast LID or a detached port.
func TestOwner(t *testing.T) {
	s := subnet.New(subnet.Config{})
	p, err := s.Attach("hca0", 0x10, func([]byte) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	for lid, want := range map[uint16]string{subnet.SMLID: "sm", p.LID(): "hca0", p.LID() + 1: "", ib.LIDMulticast: ""} {
		if got, ok := s.Owner(lid); got != want || ok != (want != "") {
			t.Errorf("Owner(%d) = %q, %v; want %q", lid, got, ok, want)
		}
	}
	p.Detach()
	if got, ok := s.Owner(p.LID()); ok {
		t.Errorf("Owner of a detached port's LID: %q", got)
	}
}
