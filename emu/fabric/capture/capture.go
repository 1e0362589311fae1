// Package capture records what crosses the fabric: a link decorator that
// writes every frame to a pcap file (Ethernet link type: Wireshark and tshark
// decode RoCEv2 with no options), and the pcap writer itself.
package capture

import (
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
)

// To is a decorator that writes every frame crossing the link to w before
// passing it on, whether the link then delivers it or not. A write error
// stops the capture, not the traffic.
func To(w *PcapWriter) fabric.Decorator {
	return func(next fabric.Link) fabric.Link {
		return fabric.LinkFunc(func(from *fabric.Port, frame []byte) bool {
			w.WritePacket(time.Now(), frame)
			return next.Send(from, frame)
		})
	}
}
