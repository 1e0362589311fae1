package tests

import (
	"fmt"
	"strings"
	"testing"
)

// allToAllRounds pairs n guests (n even) so that every two meet once, in
// n-1 rounds of n/2 concurrent pairs (the circle method): guest n-1 stays,
// the others rotate. Each pair is {server, client}, the lower number
// serving.
func allToAllRounds(n int) [][][2]int {
	var rounds [][][2]int
	for r := range n - 1 {
		pairs := [][2]int{{min(r, n-1), max(r, n-1)}}
		for k := 1; k < n/2; k++ {
			a, b := (r+k)%(n-1), (r-k+n-1)%(n-1)
			pairs = append(pairs, [2]int{min(a, b), max(a, b)})
		}
		rounds = append(rounds, pairs)
	}
	return rounds
}

// allToAllScript gives each guest its steps, round by round: serve or
// connect (retrying, bounded, until the server listens), each pair on a
// TCP port of its own.
func allToAllScript(n int) string {
	steps := make([][]string, n)
	for r, pairs := range allToAllRounds(n) {
		for i, p := range pairs {
			port := 18600 + r*n + i
			steps[p[0]] = append(steps[p[0]], fmt.Sprintf("s:%d:%d", p[1], port))
			steps[p[1]] = append(steps[p[1]], fmt.Sprintf("c:%d:%d", p[0], port))
		}
	}
	// A partner may still be booting (eight TCG guests on a loaded
	// machine): up to 10 minutes of tries.
	script := guestConnect + "CONNECT_TRIES=1200\nme=$HCAEMU_GUEST\ncase $me in\n"
	for k, s := range steps {
		script += fmt.Sprintf("%d) steps=%q ;;\n", k, strings.Join(s, " "))
	}
	return script + `esac
echo "CAPS $(ibv_devinfo -v | grep max_qp:)"
failed=0
for step in $steps; do
  role=${step%%:*}; rest=${step#*:}; peer=${rest%%:*}; port=${rest#*:}
  if [ "$role" = s ]; then
    ibv_rc_pingpong -g 1 -c -n 20 -s 1024 -p $port
    st=$?
  else
    connect 10.0.0.$((peer+1)) ibv_rc_pingpong -g 1 -c -n 20 -s 1024 -p $port
    st=$?
  fi
  echo "PAIR $me $peer $role $st"
  if [ $st -ne 0 ]; then failed=1; fi
done
exit $failed
`
}

func TestAllToAllRounds(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		met := map[[2]int]int{}
		rounds := allToAllRounds(n)
		for r, pairs := range rounds {
			busy := map[int]bool{}
			for _, p := range pairs {
				if busy[p[0]] || busy[p[1]] || p[0] >= p[1] {
					t.Fatalf("n=%d round %d: %v", n, r, pairs)
				}
				busy[p[0]], busy[p[1]] = true, true
				met[p]++
			}
		}
		if len(rounds) != n-1 || len(met) != n*(n-1)/2 {
			t.Fatalf("n=%d: %d rounds, %d pairs met", n, len(rounds), len(met))
		}
	}
}

// TestE2EGuests8: eight guests on one segment, each with its HCA, run
// ibv_rc_pingpong -c with every other guest (28 pairs, four at a time).
// The HCAs advertise the most QPs the stock driver and rdma-core's provider
// take (--max-qp 65535: QP handles of 16 bits, QPNs with 8 random bits).
func TestE2EGuests8(t *testing.T) {
	needE2E(t)
	const n = 8
	out, code := hcaemuRun(t, "--guests", fmt.Sprint(n), "--max-qp", "65535", "--ready", "started", "--timeout", "25m", "--", allToAllScript(n))
	for k := range n {
		mustContain(t, out, k, `CAPS\s+max_qp:\s+65535\b`)
		for j := range n {
			if j == k {
				continue
			}
			role := "s"
			if j < k {
				role = "c"
			}
			mustContain(t, out, k, fmt.Sprintf(`(?m)^PAIR %d %d %s 0$`, k, j, role))
		}
	}
	if code != 0 {
		t.Errorf("hcaemu run exited %d", code)
	}
}
