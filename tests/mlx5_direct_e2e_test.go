package tests

import (
	"regexp"
	"testing"
)

// TestE2EMLX5Direct: two mlx5 guests with nothing watching the subnet (no
// --pcap, no fault rule) under --strict fail move data on the direct path
// between their HCAs (RC packets in batches, MIDDLE packets in runs, run
// payloads lent and copied once), and the stock tools see it as the wire:
// ibv_rc_pingpong with 64 KiB messages between the HCAs and in loopback,
// ib_write_bw, ib_read_bw and ib_send_bw with perftest's own data path.
// Scraped after the traffic (the guests wait for the test), the subnet's
// direct counters moved, the ports counted every packet the QPs did, and
// nothing was retransmitted or dropped.
func TestE2EMLX5Direct(t *testing.T) {
	needE2E(t)
	share := t.TempDir()
	script := liveRunWaitDone + `try() {
  port=$1; shift
  if [ -z "$HCAEMU_SERVER_IP" ]; then
    timeout -t 120s "$@" -p $port; st=$?
  else
    i=0
    while true; do
      out=$("$@" -p $port $HCAEMU_SERVER_IP 2>&1); st=$?
      case "$out" in *"Couldn't connect"*|*"Unable to perform socket connection"*|*"Couldn't connect to"*) i=$((i+1)); if [ $i -lt 120 ]; then sleep 0.5; continue; fi ;; esac
      break
    done
    echo "$out"
  fi
  echo "RESULT $st $*"
}
try 18680 ibv_rc_pingpong -d mlx5_0 -n 200 -s 65536 -c
try 18681 ib_write_bw -d mlx5_0 -F -s 65536 -n 500
try 18682 ib_read_bw -d mlx5_0 -F -s 65536 -n 200
try 18683 ib_send_bw -d mlx5_0 -F -s 16384 -n 500
if [ -n "$HCAEMU_SERVER_IP" ]; then
  ibv_rc_pingpong -d mlx5_0 -n 50 -s 65536 -c -p 18684 > /tmp/lo.out 2>&1 &
  i=0
  until ibv_rc_pingpong -d mlx5_0 -n 50 -s 65536 -c -p 18684 127.0.0.1; do i=$((i+1)); [ $i -ge 120 ] && break; sleep 0.5; done
  echo "LOOPBACK $?"
  wait
fi
: > /x/g$HCAEMU_GUEST.done
wait_done
`
	r := startRun(t, share, false, "--device", "mlx5", "--guests", "2", "--strict", "fail",
		"--metrics", "127.0.0.1:0", "--timeout", "8m", "--", script)
	url := r.metricsURL()
	r.poll("both guests' traffic", func() bool { return r.shared("g0.done") && r.shared("g1.done") })
	metrics := scrape(url)
	r.release()
	if err := r.wait(); err != nil {
		t.Errorf("hcaemu run: %v", err)
	}
	out := &r.out
	for k := range 2 {
		mustContain(t, out.String(), k,
			regexp.QuoteMeta("RESULT 0 ibv_rc_pingpong -d mlx5_0 -n 200 -s 65536 -c"),
			regexp.QuoteMeta("RESULT 0 ib_write_bw -d mlx5_0 -F -s 65536 -n 500"),
			regexp.QuoteMeta("RESULT 0 ib_read_bw -d mlx5_0 -F -s 65536 -n 200"),
			regexp.QuoteMeta("RESULT 0 ib_send_bw -d mlx5_0 -F -s 16384 -n 500"))
	}
	mustContain(t, out.String(), 1, `26214400 bytes in [0-9.]+ seconds`, `LOOPBACK 0`, `(?s)6553600 bytes in [0-9.]+ seconds.*LOOPBACK 0`)
	direct := map[string]float64{}
	for _, kind := range []string{"all", "runs", "lent"} {
		direct[kind] = metricValue(metrics, `hcaemu_subnet_direct_packets_total{kind="`+kind+`"}`)
		if direct[kind] <= 0 {
			t.Errorf("no packets on the subnet's direct path of kind %s: %v", kind, direct)
		}
	}
	for _, hca := range []string{"hca0", "hca1"} {
		sent := metricValue(metrics, `hcaemu_device_packets_total{device="`+hca+`",dir="sent"}`)
		frames := metricValue(metrics, `hcaemu_port_frames_total{device="`+hca+`",dir="out"}`)
		again := metricValue(metrics, `hcaemu_device_retransmitted_packets_total{device="`+hca+`"}`)
		addr := metricValue(metrics, `hcaemu_port_dropped_frames_total{device="`+hca+`",reason="address"}`)
		revoked := metricValue(metrics, `hcaemu_port_dropped_frames_total{device="`+hca+`",reason="revoked"}`)
		// Every user MR goes through mlx5_ib's MR cache: UMR WQEs load its
		// translation (umr_modify_entity_size_disabled 0).
		if xlt, refused := metricValue(metrics, `hcaemu_mlx5_umr_translations_total{device="`+hca+`"}`),
			metricValue(metrics, `hcaemu_mlx5_umr_refused_total{device="`+hca+`"}`); xlt <= 0 || refused != 0 {
			t.Errorf("%s: %.0f translations loaded by UMR WQEs, %.0f UMR WQEs refused", hca, xlt, refused)
		}
		if sent <= 0 || frames < sent || again != 0 || addr != 0 || revoked != 0 {
			t.Errorf("%s: %.0f packets sent by its QPs, %.0f out of its port (the GSI's and IPoIB's too), %.0f retransmitted, %.0f dropped for their address, %.0f revoked",
				hca, sent, frames, again, addr, revoked)
		}
	}
	t.Logf("subnet direct packets: %v", direct)
}
