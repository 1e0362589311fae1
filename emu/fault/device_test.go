package fault_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hcaemu/hcaemu/emu/fault"
	"github.com/hcaemu/hcaemu/emu/hca"
	_ "github.com/hcaemu/hcaemu/emu/pvrdma" // registers the PVRDMA command names
	"github.com/hcaemu/hcaemu/emu/pvrdma/abi"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// TestDecodeBadDevicePlans: device and transport rules whose fields cannot
// hold, or parameters out of range, are refused with the rule and field.
func TestDecodeBadDevicePlans(t *testing.T) {
	for _, tc := range []struct {
		name, plan string
		want       []string
	}{
		{"unknown status", `{"rules":[{"name":"s","action":{"kind":"complete_status","status":"IBV_WC_OOPS"}}]}`, []string{"rule 0", `"s"`, "action.status", "IBV_WC_OOPS"}},
		{"unknown event", `{"rules":[{"action":{"kind":"qp_error","event":"QP_ANGRY"}}]}`, []string{"action.event"}},
		{"unknown nak code", `{"rules":[{"action":{"kind":"nak","code":"sorry"}}]}`, []string{"action.code"}},
		{"no nak code", `{"rules":[{"action":{"kind":"nak"}}]}`, []string{"action.code"}},
		{"negative rnr timer", `{"rules":[{"action":{"kind":"rnr_nak","timer":-1}}]}`, []string{"action.timer"}},
		{"rnr timer too big", `{"rules":[{"action":{"kind":"rnr_nak","timer":32}}]}`, []string{"action.timer"}},
		{"negative errno", `{"rules":[{"action":{"kind":"fail_command","errno":-5}}]}`, []string{"action.errno"}},
		{"port down without duration", `{"rules":[{"action":{"kind":"port_down"}}]}`, []string{"action.duration"}},
		{"port down negative", `{"rules":[{"action":{"kind":"port_down","duration":"-1s"}}]}`, []string{"negative"}},
		{"foreign parameter", `{"rules":[{"action":{"kind":"gid_change","status":"SUCCESS"}}]}`, []string{"action.status", "not a parameter of gid_change"}},
		{"unknown command", `{"rules":[{"match":{"commands":["CREATE_WORMHOLE"]},"action":{"kind":"fail_command"}}]}`, []string{"match.commands[0]", "CREATE_WORMHOLE"}},
		{"unknown wr opcode", `{"rules":[{"match":{"wr_opcodes":["teleport"]},"action":{"kind":"complete_status","status":"SUCCESS"}}]}`, []string{"match.wr_opcodes[0]", "teleport"}},
		{"commands on a packet action", `{"rules":[{"match":{"commands":["CREATE_MR"]},"action":{"kind":"drop"}}]}`, []string{"match.commands", "packet action"}},
		{"commands at completion", `{"rules":[{"match":{"commands":["CREATE_MR"]},"action":{"kind":"complete_status","status":"SUCCESS"}}]}`, []string{"match.commands", "nothing can match"}},
		{"wr opcodes at the responder", `{"rules":[{"match":{"wr_opcodes":["send"]},"action":{"kind":"nak","code":"invalid_request"}}]}`, []string{"match.wr_opcodes", "nothing can match"}},
		{"qpn at a command", `{"rules":[{"match":{"qpn":3},"action":{"kind":"fail_command"}}]}`, []string{"match.qpn", "nothing can match"}},
		{"psn at completion", `{"rules":[{"match":{"psn":{"first":1,"last":2}},"action":{"kind":"cq_error"},"schedule":{}}],"seed":1}`, []string{}},
		{"key at completion", `{"rules":[{"match":{"key":7},"action":{"kind":"complete_status","status":"SUCCESS"}}]}`, []string{"match.key", "nothing can match"}},
		{"direction on a device action", `{"rules":[{"match":{"direction":"tx"},"action":{"kind":"fail_dma"}}]}`, []string{"match.direction"}},
		{"peer on a device action", `{"rules":[{"match":{"peer":"10.0.0.1"},"action":{"kind":"device_fatal"}}]}`, []string{"match.peer"}},
		{"wrong point", `{"rules":[{"match":{"point":"dma"},"action":{"kind":"nak","code":"invalid_request"}}]}`, []string{"match.point", "only at responder"}},
		{"unknown point", `{"rules":[{"match":{"point":"kitchen"},"action":{"kind":"gid_change"}}]}`, []string{"match.point", "kitchen"}},
		{"responder sees no ACKs", `{"rules":[{"match":{"classes":["ack"]},"action":{"kind":"suppress_ack"}}]}`, []string{"nothing reaches the responder"}},
		{"responder sees no UD", `{"rules":[{"match":{"transport":"ud"},"action":{"kind":"rnr_nak"}}]}`, []string{"nothing reaches the responder"}},
		{"device occurrence without point", `{"rules":[{"match":{"device":"hca0","occurrence":3},"action":{"kind":"gid_change"}}]}`, []string{"match.occurrence"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fault.DecodePlan(strings.NewReader(tc.plan))
			if tc.name == "psn at completion" {
				// psn picks the responder point for a QP action: accepted.
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("plan accepted: %s", tc.plan)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestDeviceMatch: a device rule answers exactly the events its match
// names, with the action it compiles to.
func TestDeviceMatch(t *testing.T) {
	qpn := uint32(17)
	for _, tc := range []struct {
		name  string
		rule  string
		ev    hca.FaultEvent
		dev   string
		match bool
		want  hca.FaultAction
	}{
		{"command", `{"match":{"commands":["CREATE_MR"]},"action":{"kind":"fail_command"}}`,
			hca.FaultEvent{Point: hca.FaultAtCommand, Command: cmd(abi.OpCreateMR)}, "hca0", true, hca.FaultAction{Kind: hca.FaultFailCommand, Errno: 22}},
		{"other command", `{"match":{"commands":["CREATE_MR"]},"action":{"kind":"fail_command","errno":12}}`,
			hca.FaultEvent{Point: hca.FaultAtCommand, Command: cmd(abi.OpCreateCQ)}, "hca0", false, hca.FaultAction{}},
		{"command by number", `{"match":{"commands":["4"]},"action":{"kind":"fail_command","errno":12}}`,
			hca.FaultEvent{Point: hca.FaultAtCommand, Command: cmd(abi.OpCreateMR)}, "hca0", true, hca.FaultAction{Kind: hca.FaultFailCommand, Errno: 12}},
		{"other device", `{"match":{"device":"hca1"},"action":{"kind":"fail_command"}}`,
			hca.FaultEvent{Point: hca.FaultAtCommand, Command: cmd(abi.OpCreateMR)}, "hca0", false, hca.FaultAction{}},
		{"guest", `{"match":{"guest":1},"action":{"kind":"gid_change"},"schedule":{}}`,
			hca.FaultEvent{Point: hca.FaultAtCompletion, QPN: qpn}, "hca1", true, hca.FaultAction{Kind: hca.FaultGIDChange}},
		{"completion of another point", `{"action":{"kind":"complete_status","status":"REM_OP_ERR"}}`,
			hca.FaultEvent{Point: hca.FaultAtDMA, QPN: qpn}, "hca0", false, hca.FaultAction{}},
		{"completion wr opcode", `{"match":{"qpn":17,"wr_opcodes":["rdma_read"],"size":{"min":4096,"max":8192}},"action":{"kind":"complete_status","status":"IBV_WC_REM_OP_ERR"}}`,
			hca.FaultEvent{Point: hca.FaultAtCompletion, QPN: qpn, WROpcode: "rdma_read", Size: 4096}, "hca0", true, hca.FaultAction{Kind: hca.FaultCompleteStatus, Status: 11}},
		{"completion other opcode", `{"match":{"wr_opcodes":["rdma_read"]},"action":{"kind":"complete_status","status":"IBV_WC_REM_OP_ERR"}}`,
			hca.FaultEvent{Point: hca.FaultAtCompletion, QPN: qpn, WROpcode: "send", Size: 4096}, "hca0", false, hca.FaultAction{}},
		{"completion too small", `{"match":{"size":{"min":4097,"max":8192}},"action":{"kind":"complete_status","status":"IBV_WC_REM_OP_ERR"}}`,
			hca.FaultEvent{Point: hca.FaultAtCompletion, QPN: qpn, Size: 4096}, "hca0", false, hca.FaultAction{}},
		{"completion other qp", `{"match":{"qpn":18},"action":{"kind":"qp_error"}}`,
			hca.FaultEvent{Point: hca.FaultAtCompletion, QPN: qpn}, "hca0", false, hca.FaultAction{}},
		{"qp error default event", `{"match":{"qpn":17},"action":{"kind":"qp_error"}}`,
			hca.FaultEvent{Point: hca.FaultAtCompletion, QPN: qpn}, "hca0", true, hca.FaultAction{Kind: hca.FaultQPError, Event: hca.EventQPFatal}},
		{"dma key", `{"match":{"key":99},"action":{"kind":"fail_dma"}}`,
			hca.FaultEvent{Point: hca.FaultAtDMA, QPN: qpn, Key: 99, HasKey: true}, "hca0", true, hca.FaultAction{Kind: hca.FaultFailDMA}},
		{"dma other key", `{"match":{"key":99},"action":{"kind":"fail_dma"}}`,
			hca.FaultEvent{Point: hca.FaultAtDMA, QPN: qpn, Key: 98, HasKey: true}, "hca0", false, hca.FaultAction{}},
		{"responder psn", `{"match":{"psn":{"first":10,"last":12}},"action":{"kind":"rnr_nak","timer":14}}`,
			hca.FaultEvent{Point: hca.FaultAtResponder, QPN: qpn, PSN: 11, Opcode: roce.RCSendOnly}, "hca0", true, hca.FaultAction{Kind: hca.FaultRNRNAK, RNRTimer: 14}},
		{"responder outside psn", `{"match":{"psn":{"first":10,"last":12}},"action":{"kind":"rnr_nak"}}`,
			hca.FaultEvent{Point: hca.FaultAtResponder, QPN: qpn, PSN: 13, Opcode: roce.RCSendOnly}, "hca0", false, hca.FaultAction{}},
		{"responder class", `{"match":{"classes":["write"]},"action":{"kind":"nak","code":"remote_access_error"}}`,
			hca.FaultEvent{Point: hca.FaultAtResponder, QPN: qpn, Opcode: roce.RCRDMAWriteOnly}, "hca0", true, hca.FaultAction{Kind: hca.FaultNAK, NAK: roce.NAKRemoteAccessError}},
		{"responder other class", `{"match":{"classes":["write"]},"action":{"kind":"suppress_ack"}}`,
			hca.FaultEvent{Point: hca.FaultAtResponder, QPN: qpn, Opcode: roce.RCSendOnly}, "hca0", false, hca.FaultAction{}},
		{"responder rkey", `{"match":{"key":5},"action":{"kind":"suppress_ack"}}`,
			hca.FaultEvent{Point: hca.FaultAtResponder, QPN: qpn, Opcode: roce.RCRDMAWriteOnly, Key: 5, HasKey: true}, "hca0", true, hca.FaultAction{Kind: hca.FaultSuppressACK}},
		{"port down at a command", `{"match":{"commands":["QUERY_PORT"]},"action":{"kind":"port_down","duration":"2s"}}`,
			hca.FaultEvent{Point: hca.FaultAtCommand, Command: cmd(abi.OpQueryPort)}, "hca0", true, hca.FaultAction{Kind: hca.FaultPortDown, Duration: 2e9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := fault.DecodePlan(strings.NewReader(`{"rules":[` + tc.rule + `]}`))
			if err != nil {
				t.Fatal(err)
			}
			inj, err := fault.NewInjector(plan, fault.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer inj.Close()
			ev := tc.ev
			got := inj.Device(tc.dev).Fault(&ev)
			if got != tc.want {
				t.Fatalf("action %+v, want %+v", got, tc.want)
			}
			st := inj.Stats().Rules[0]
			if m := st.Matched == 1; m != tc.match || st.Fired != st.Matched {
				t.Fatalf("matched %d fired %d, want match %v", st.Matched, st.Fired, tc.match)
			}
			// Frames never reach a device rule: the fabric's view is unchanged.
			if got := inj.Stats().Fired; got != st.Fired {
				t.Fatalf("fired %d", got)
			}
		})
	}
}

// TestDeviceSchedule: a device rule's schedule (after, every, times, arm)
// counts the events of its point, and the first rule that fires decides.
func TestDeviceSchedule(t *testing.T) {
	plan, err := fault.DecodePlan(strings.NewReader(`{"rules":[
		{"name":"first","match":{"commands":["QUERY_PORT"]},"action":{"kind":"fail_command","errno":1},"schedule":{"after":2,"every":2,"times":2,"arm":["second"]}},
		{"name":"second","match":{"commands":["QUERY_PORT"]},"action":{"kind":"fail_command","errno":2},"schedule":{"disarmed":true}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	inj, err := fault.NewInjector(plan, fault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inj.Close()
	var got []uint32
	for range 10 {
		got = append(got, inj.Device("hca0").Fault(&hca.FaultEvent{Point: hca.FaultAtCommand, Command: cmd(abi.OpQueryPort)}).Errno)
	}
	// 1, 2: skipped (after 2); 3: skipped (every 2); 4: first fires, arms
	// second; 5: second; 6: first (its 2nd and last time); then second.
	want := []uint32{0, 0, 0, 1, 2, 1, 2, 2, 2, 2}
	if !slicesEqual(got, want) {
		t.Fatalf("errnos %v, want %v", got, want)
	}
}

func slicesEqual(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestControlDeviceRules: the live socket adds device rules; a bad one gets
// an error reply and changes nothing.
func TestControlDeviceRules(t *testing.T) {
	inj, err := fault.NewInjector(nil, fault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inj.Close()
	bad := inj.Do(fault.Request{Op: "add", Rule: json.RawMessage(`{"name":"x","match":{"wr_opcodes":["send"]},"action":{"kind":"fail_command"}}`)})
	if bad.OK || !strings.Contains(bad.Error, "match.wr_opcodes") || len(inj.Stats().Rules) != 0 {
		t.Fatalf("bad add: %+v, rules %d", bad, len(inj.Stats().Rules))
	}
	ok := inj.Do(fault.Request{Op: "add", Rule: json.RawMessage(`{"name":"flap","match":{"device":"hca0","commands":["QUERY_PORT"]},"action":{"kind":"port_down","duration":"1s"},"schedule":{"times":1}}`)})
	if !ok.OK {
		t.Fatal(ok.Error)
	}
	if a := inj.Device("hca0").Fault(&hca.FaultEvent{Point: hca.FaultAtCommand, Command: cmd(abi.OpQueryPort)}); a.Kind != hca.FaultPortDown {
		t.Fatalf("action %+v", a)
	}
	// Removed, and a packet rule added: the device is asked nothing more.
	if rsp := inj.Do(fault.Request{Op: "rm", Name: "flap"}); !rsp.OK {
		t.Fatal(rsp.Error)
	}
	if rsp := inj.Do(fault.Request{Op: "add", Rule: json.RawMessage(`{"name":"loss","action":{"kind":"drop"}}`)}); !rsp.OK {
		t.Fatal(rsp.Error)
	}
	if a := inj.Device("hca0").Fault(&hca.FaultEvent{Point: hca.FaultAtCommand, Command: cmd(abi.OpQueryPort)}); a.Kind != hca.FaultNone {
		t.Fatalf("action %+v after rm", a)
	}
	if st := inj.Stats(); st.Rules[0].Matched != 0 {
		t.Fatalf("the packet rule matched a device event: %+v", st.Rules[0])
	}
}

// cmd is a PVRDMA command as the device names it to its fault hook.
func cmd(op abi.Opcode) hca.Command { return hca.Command{Op: uint32(op), Name: op.String()} }
