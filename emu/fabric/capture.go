package fabric

import "time"

// Capture is a decorator that writes every frame crossing the link to a pcap
// file (Ethernet link type: Wireshark and tshark decode it as RoCE with no
// options) before passing it on. A write error stops the capture, not the
// traffic.
func Capture(w *PcapWriter) Decorator {
	return func(next Link) Link {
		return LinkFunc(func(from *Port, frame []byte) bool {
			w.WritePacket(time.Now(), frame)
			return next.Send(from, frame)
		})
	}
}
