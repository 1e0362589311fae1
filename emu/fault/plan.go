package fault

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hcaemu/hcaemu/emu/roce"
)

// Plan is a fault plan: the rules, applied in order to every frame, and
// the seed of the plan's random generator (probabilities, jitter).
type Plan struct {
	// Seed seeds the plan's generator; nil leaves the choice to the
	// caller (hcaemu: --faults-seed, else the time).
	Seed  *uint64 `json:"seed,omitempty"`
	Rules []Rule  `json:"rules"`
}

// Rule is match → action → schedule.
type Rule struct {
	// Name names the rule in logs, counters and live commands; a rule
	// without one is called "rule<index>".
	Name     string   `json:"name,omitempty"`
	Match    Match    `json:"match"`
	Action   Action   `json:"action"`
	Schedule Schedule `json:"schedule"`
}

// Match selects frames. Every field given must hold; an empty Match
// matches every RoCEv2 frame and every InfiniBand packet (on a subnet the
// injector decorates).
type Match struct {
	// Device is the HCA's name (hcaemu names them hca0, hca1, …); Guest k
	// is the same as Device "hca<k>".
	Device string `json:"device,omitempty"`
	Guest  *int   `json:"guest,omitempty"`
	// Direction is relative to Device: "tx" (frames it sends), "rx"
	// (frames sent to it) or empty (either; without a device, every frame
	// once, counted as the sender's tx).
	Direction string `json:"direction,omitempty"`
	// QPN is the destination QP number of the BTH.
	QPN *uint32 `json:"qpn,omitempty"`
	// Transport is "rc" or "ud".
	Transport string `json:"transport,omitempty"`
	// Opcodes are BTH opcode names (RC_SEND_ONLY, RC_ACKNOWLEDGE, …, as
	// the IBTA spells them) or numbers ("0x04").
	Opcodes []string `json:"opcodes,omitempty"`
	// Classes are opcode classes: send, write, read_request,
	// read_response, atomic, ack (acknowledges, NAKs included), nak (NAK
	// and RNR NAK only), cm (CM MADs: UD sends to QP1 of management class
	// 0x07), cnp.
	Classes []string `json:"classes,omitempty"`
	// PSN is an inclusive range of PSNs (it may wrap at 2^24).
	PSN *PSNRange `json:"psn,omitempty"`
	// Peer is the other end: the destination of a tx frame, the source of
	// an rx frame. An IP address matches RoCEv2 frames (their IP header);
	// "lid:N" (N decimal or 0x hex) matches InfiniBand packets (their
	// LRH's DLID or SLID).
	Peer string `json:"peer,omitempty"`
	// Size bounds the payload length in bytes (inclusive).
	Size *SizeRange `json:"size,omitempty"`
	// Occurrence, when not 0, matches only the n-th frame (from 1) with
	// this rule's device, direction, QPN, PSN and opcode seen by the
	// injector: Replay uses it to hit a retransmission and not the
	// original. It needs Device, Direction, QPN, one PSN and one opcode.
	Occurrence uint64 `json:"occurrence,omitempty"`

	// The fields of device actions (docs/faults.md, "Device and
	// transport actions").

	// Point is where in the device the rule is asked: "command",
	// "completion", "responder" or "dma"; empty: the action's own point.
	// Packet actions have no point: they act on the fabric.
	Point string `json:"point,omitempty"`
	// Commands are command names (QUERY_PORT, CREATE_MR, …: PVRDMA_CMD_*
	// without the prefix) or numbers; point command.
	Commands []string `json:"commands,omitempty"`
	// WROpcodes are work-request opcodes: send, rdma_write, rdma_read,
	// comp_swap, fetch_add, local_inv, fast_reg_mr (send side), recv,
	// recv_rdma_with_imm (receive side); points completion and dma.
	WROpcodes []string `json:"wr_opcodes,omitempty"`
	// Key is a memory key: the lkey of the work request's first SGE
	// (point dma) or the rkey of the request (point responder).
	Key *uint32 `json:"key,omitempty"`
}

// PSNRange is an inclusive range of 24-bit PSNs.
type PSNRange struct {
	First uint32 `json:"first"`
	Last  uint32 `json:"last"`
}

// SizeRange is an inclusive range of payload sizes.
type SizeRange struct {
	Min uint32 `json:"min"`
	Max uint32 `json:"max"`
}

// Action kinds. A kind's parameters are the Action fields named after it;
// the others must be left out.
const (
	ActDrop           = "drop"            // lose the frame
	ActDuplicate      = "duplicate"       // copies: deliver the frame and that many copies (default 1)
	ActDelay          = "delay"           // delay + jitter (uniform in [0, jitter]): deliver later
	ActReorder        = "reorder"         // frames: hold until that many later frames of the same sender passed (default 1), at most max_hold (default 100ms)
	ActCorruptICRC    = "corrupt_icrc"    // invert the ICRC: receivers drop the frame
	ActCorruptPayload = "corrupt_payload" // xor the payload byte at offset with xor (default 0xff), then recompute the ICRC
	ActRewrite        = "rewrite"         // set a header field to value, then recompute the ICRC unless keep_icrc

	// Transport actions (point responder): the responder's answer to a
	// request packet.
	ActNAK         = "nak"          // code: answer with a NAK instead of executing
	ActRNRNAK      = "rnr_nak"      // timer: answer with an RNR NAK instead of executing
	ActSuppressACK = "suppress_ack" // execute, but send no ACK for the packet

	// Device actions.
	ActFailCommand    = "fail_command"    // errno: the command fails (point command)
	ActCompleteStatus = "complete_status" // status: the completion carries it (point completion)
	ActQPError        = "qp_error"        // event: the QP goes to ERR with that async event
	ActCQError        = "cq_error"        // CQ_ERR on the QP's CQ, which takes no more CQEs
	ActSRQError       = "srq_error"       // SRQ_ERR on the QP's SRQ
	ActSRQLimit       = "srq_limit"       // SRQ_LIMIT_REACHED on the QP's SRQ
	ActFailDMA        = "fail_dma"        // the WR's buffers cannot be reached: LOC_PROT_ERR (point dma)
	ActPortDown       = "port_down"       // duration: PORT_ERR, port DOWN, frames lost; then PORT_ACTIVE
	ActGIDChange      = "gid_change"      // GID_CHANGE on port 1
	ActDeviceFatal    = "device_fatal"    // DEVICE_FATAL: the device stops
)

// Action is what a firing rule does to the frame.
type Action struct {
	Kind     string   `json:"kind"`
	Copies   int      `json:"copies,omitempty"`
	Delay    Duration `json:"delay,omitempty"`
	Jitter   Duration `json:"jitter,omitempty"`
	Frames   int      `json:"frames,omitempty"`
	MaxHold  Duration `json:"max_hold,omitempty"`
	Offset   int      `json:"offset,omitempty"`
	XOR      int      `json:"xor,omitempty"`
	Field    string   `json:"field,omitempty"`
	Value    *uint64  `json:"value,omitempty"`
	KeepICRC bool     `json:"keep_icrc,omitempty"`
	// Parameters of the transport and device actions.
	Code     string   `json:"code,omitempty"`     // nak: psn_sequence_error, invalid_request, remote_access_error, remote_operational_error
	Timer    *int     `json:"timer,omitempty"`    // rnr_nak: the RNR timer, IB encoding 0..31
	Errno    int      `json:"errno,omitempty"`    // fail_command: the value in ERR (default 22, EINVAL)
	Status   string   `json:"status,omitempty"`   // complete_status: an ibv_wc_status name (IBV_WC_REM_ACCESS_ERR)
	Event    string   `json:"event,omitempty"`    // qp_error: QP_FATAL, QP_REQ_ERR or QP_ACCESS_ERR
	Duration Duration `json:"duration,omitempty"` // port_down: how long the port stays down
}

// Schedule decides which matching frames a rule fires on. A frame the rule
// matches while armed is a match; the rule fires on a match when every
// condition holds, checked in this order: inside the window, past the
// first After matches, every Every-th match after those, fewer than Times
// firings so far, and a draw of the plan's generator below Probability.
type Schedule struct {
	After       uint64   `json:"after,omitempty"`
	Every       uint64   `json:"every,omitempty"`
	Probability *float64 `json:"probability,omitempty"`
	Times       uint64   `json:"times,omitempty"`
	// From and Until bound the window, measured from the injector's start
	// (Until 0: no end).
	From  Duration `json:"from,omitempty"`
	Until Duration `json:"until,omitempty"`
	// Disarmed rules match nothing until another rule arms them (or a
	// live "enable").
	Disarmed bool `json:"disarmed,omitempty"`
	// Arm and Disarm name the rules a firing arms or disarms (blkdebug's
	// states): "drop the 3rd ACK, then start losing data" is two rules.
	Arm    []string `json:"arm,omitempty"`
	Disarm []string `json:"disarm,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("10ms").
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string; negative durations are refused.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"10ms\", not %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// LoadPlan reads and validates a plan file.
func LoadPlan(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := DecodePlan(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// DecodePlan decodes a plan strictly (unknown fields refused) and
// validates every rule; an error names the rule (index and name) and the
// field.
func DecodePlan(r io.Reader) (*Plan, error) {
	var raw struct {
		Seed  *uint64           `json:"seed"`
		Rules []json.RawMessage `json:"rules"`
	}
	if err := strictDecode(r, &raw); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	p := &Plan{Seed: raw.Seed}
	for i, m := range raw.Rules {
		var rule Rule
		if err := strictDecode(bytes.NewReader(m), &rule); err != nil {
			return nil, fmt.Errorf("rule %d%s: %w", i, nameOf(m), err)
		}
		p.Rules = append(p.Rules, rule)
	}
	if _, err := compilePlan(p); err != nil {
		return nil, err
	}
	return p, nil
}

// DecodeRule decodes one rule strictly and checks it on its own (the
// names it arms are checked against the plan it joins).
func DecodeRule(b []byte) (Rule, error) {
	var rule Rule
	if err := strictDecode(bytes.NewReader(b), &rule); err != nil {
		return rule, fmt.Errorf("rule%s: %w", nameOf(b), err)
	}
	if _, err := compileRule(&rule); err != nil {
		return rule, fmt.Errorf("rule %q: %w", rule.Name, err)
	}
	return rule, nil
}

// nameOf returns ` "name"` when the raw rule has a name, for messages.
func nameOf(raw []byte) string {
	var n struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &n) == nil && n.Name != "" {
		return fmt.Sprintf(" %q", n.Name)
	}
	return ""
}

func strictDecode(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf("field %s: %s is not a valid %s", te.Field, te.Value, te.Type)
		}
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}

// fieldError names the field of a rule that is wrong.
func fieldError(field, format string, args ...any) error {
	return fmt.Errorf("field %s: %s", field, fmt.Sprintf(format, args...))
}

// compilePlan checks every rule and the names rules refer to.
func compilePlan(p *Plan) ([]*rule, error) {
	var rules []*rule
	names := map[string]int{}
	for i := range p.Rules {
		if p.Rules[i].Name == "" {
			p.Rules[i].Name = "rule" + strconv.Itoa(i)
		}
		name := p.Rules[i].Name
		if j, dup := names[name]; dup {
			return nil, fmt.Errorf("rule %d %q: field name: rule %d has the same name", i, name, j)
		}
		names[name] = i
		r, err := compileRule(&p.Rules[i])
		if err != nil {
			return nil, fmt.Errorf("rule %d %q: %w", i, name, err)
		}
		rules = append(rules, r)
	}
	for i, r := range p.Rules {
		if err := checkRefs(r, func(n string) bool { _, ok := names[n]; return ok }); err != nil {
			return nil, fmt.Errorf("rule %d %q: %w", i, r.Name, err)
		}
	}
	return rules, nil
}

func checkRefs(r Rule, exists func(string) bool) error {
	for _, n := range r.Schedule.Arm {
		if !exists(n) {
			return fieldError("schedule.arm", "no rule is called %q", n)
		}
	}
	for _, n := range r.Schedule.Disarm {
		if !exists(n) {
			return fieldError("schedule.disarm", "no rule is called %q", n)
		}
	}
	return nil
}

// opcodesByName maps the IBTA names of the known opcodes to them.
var opcodesByName = func() map[string]roce.Opcode {
	m := map[string]roce.Opcode{}
	for o := range 256 {
		if op := roce.Opcode(o); op.Valid() {
			m[op.String()] = op
		}
	}
	return m
}()

// opcode classes and the opcodes in each.
const (
	classSend         = "send"
	classWrite        = "write"
	classReadRequest  = "read_request"
	classReadResponse = "read_response"
	classAtomic       = "atomic"
	classAck          = "ack"
	classNAK          = "nak"
	classCM           = "cm"
	classCNP          = "cnp"
)

// classOpcodes returns the opcodes of a class (nak and cm are refined on
// the packet: syndrome, QP1 and management class).
func classOpcodes(class string) ([]roce.Opcode, bool) {
	var want func(roce.OpcodeInfo, roce.Opcode) bool
	switch class {
	case classSend:
		want = func(i roce.OpcodeInfo, _ roce.Opcode) bool { return i.Op == roce.OpSend }
	case classWrite:
		want = func(i roce.OpcodeInfo, _ roce.Opcode) bool { return i.Op == roce.OpRDMAWrite }
	case classReadRequest:
		want = func(i roce.OpcodeInfo, _ roce.Opcode) bool { return i.Op == roce.OpRDMAReadRequest }
	case classReadResponse:
		want = func(i roce.OpcodeInfo, _ roce.Opcode) bool { return i.Op == roce.OpRDMAReadResponse }
	case classAtomic:
		want = func(i roce.OpcodeInfo, _ roce.Opcode) bool {
			return i.Op == roce.OpCompareSwap || i.Op == roce.OpFetchAdd || i.Op == roce.OpAtomicWrite
		}
	case classAck:
		want = func(i roce.OpcodeInfo, _ roce.Opcode) bool {
			return i.Op == roce.OpAcknowledge || i.Op == roce.OpAtomicAcknowledge
		}
	case classNAK:
		want = func(_ roce.OpcodeInfo, o roce.Opcode) bool { return o == roce.RCAcknowledge }
	case classCM:
		want = func(i roce.OpcodeInfo, o roce.Opcode) bool {
			return o.Transport() == roce.TransportUD && i.Op == roce.OpSend
		}
	case classCNP:
		want = func(i roce.OpcodeInfo, _ roce.Opcode) bool { return i.Op == roce.OpCNP }
	default:
		return nil, false
	}
	var ops []roce.Opcode
	for o := range 256 {
		op := roce.Opcode(o)
		if info, ok := op.Info(); ok && want(info, op) {
			ops = append(ops, op)
		}
	}
	return ops, true
}

// rewriteField describes a header field a rewrite action can set.
type rewriteField struct {
	header roce.ExtHeaders // 0: the BTH
	bits   uint
	set    func(p *roce.Packet, v uint64)
}

var rewriteFields = map[string]rewriteField{
	"bth.opcode":        {0, 8, func(p *roce.Packet, v uint64) { p.BTH.SetOpcode(roce.Opcode(v)) }},
	"bth.se":            {0, 1, func(p *roce.Packet, v uint64) { p.BTH.SetSE(v != 0) }},
	"bth.migreq":        {0, 1, func(p *roce.Packet, v uint64) { p.BTH.SetMigReq(v != 0) }},
	"bth.tver":          {0, 4, func(p *roce.Packet, v uint64) { p.BTH.SetTVer(uint8(v)) }},
	"bth.pkey":          {0, 16, func(p *roce.Packet, v uint64) { p.BTH.SetPKey(uint16(v)) }},
	"bth.fecn":          {0, 1, func(p *roce.Packet, v uint64) { p.BTH.SetFECN(v != 0) }},
	"bth.becn":          {0, 1, func(p *roce.Packet, v uint64) { p.BTH.SetBECN(v != 0) }},
	"bth.dest_qp":       {0, 24, func(p *roce.Packet, v uint64) { p.BTH.SetDestQP(uint32(v)) }},
	"bth.ack_req":       {0, 1, func(p *roce.Packet, v uint64) { p.BTH.SetAckReq(v != 0) }},
	"bth.psn":           {0, 24, func(p *roce.Packet, v uint64) { p.BTH.SetPSN(uint32(v)) }},
	"aeth.syndrome":     {roce.HasAETH, 8, func(p *roce.Packet, v uint64) { p.AETH.SetSyndrome(roce.Syndrome(v)) }},
	"aeth.msn":          {roce.HasAETH, 24, func(p *roce.Packet, v uint64) { p.AETH.SetMSN(uint32(v)) }},
	"reth.va":           {roce.HasRETH, 64, func(p *roce.Packet, v uint64) { p.RETH.SetVA(v) }},
	"reth.rkey":         {roce.HasRETH, 32, func(p *roce.Packet, v uint64) { p.RETH.SetRKey(uint32(v)) }},
	"reth.dma_length":   {roce.HasRETH, 32, func(p *roce.Packet, v uint64) { p.RETH.SetDMALength(uint32(v)) }},
	"deth.qkey":         {roce.HasDETH, 32, func(p *roce.Packet, v uint64) { p.DETH.SetQKey(uint32(v)) }},
	"deth.src_qp":       {roce.HasDETH, 24, func(p *roce.Packet, v uint64) { p.DETH.SetSrcQP(uint32(v)) }},
	"atomiceth.va":      {roce.HasAtomicETH, 64, func(p *roce.Packet, v uint64) { p.AtomicETH.SetVA(v) }},
	"atomiceth.rkey":    {roce.HasAtomicETH, 32, func(p *roce.Packet, v uint64) { p.AtomicETH.SetRKey(uint32(v)) }},
	"immdt":             {roce.HasImmDt, 32, func(p *roce.Packet, v uint64) { p.ImmDt.SetValue(uint32(v)) }},
	"ieth.rkey":         {roce.HasIETH, 32, func(p *roce.Packet, v uint64) { p.IETH.SetRKey(uint32(v)) }},
	"atomicacketh.orig": {roce.HasAtomicAckETH, 64, func(p *roce.Packet, v uint64) { p.AtomicAckETH.SetOrigData(v) }},
}

// actionParams lists the parameters each kind takes.
var actionParams = map[string][]string{
	ActDrop:           nil,
	ActDuplicate:      {"copies"},
	ActDelay:          {"delay", "jitter"},
	ActReorder:        {"frames", "max_hold"},
	ActCorruptICRC:    nil,
	ActCorruptPayload: {"offset", "xor"},
	ActRewrite:        {"field", "value", "keep_icrc"},
	ActNAK:            {"code"},
	ActRNRNAK:         {"timer"},
	ActSuppressACK:    nil,
	ActFailCommand:    {"errno"},
	ActCompleteStatus: {"status"},
	ActQPError:        {"event"},
	ActCQError:        nil,
	ActSRQError:       nil,
	ActSRQLimit:       nil,
	ActFailDMA:        nil,
	ActPortDown:       {"duration"},
	ActGIDChange:      nil,
	ActDeviceFatal:    nil,
}

// Limits on action parameters: a plan cannot make the fabric hold frames
// for long nor multiply them without bound.
const (
	maxCopies      = 16
	maxDelay       = 10 * time.Second
	maxFrames      = 1024
	defaultMaxHold = 100 * time.Millisecond
)

// compileRule checks one rule (not its references) and returns its
// compiled form.
func compileRule(r *Rule) (*rule, error) {
	c := &rule{spec: *r, armed: !r.Schedule.Disarmed}
	m := &r.Match
	if m.Guest != nil {
		if *m.Guest < 0 {
			return nil, fieldError("match.guest", "%d is negative", *m.Guest)
		}
		g := "hca" + strconv.Itoa(*m.Guest)
		if m.Device != "" && m.Device != g {
			return nil, fieldError("match.guest", "guest %d is device %s, but match.device is %q: nothing can match", *m.Guest, g, m.Device)
		}
		c.device = g
	} else {
		c.device = m.Device
	}
	switch m.Direction {
	case "":
		c.dir = dirAny
	case "tx":
		c.dir = dirTx
	case "rx":
		c.dir = dirRx
	default:
		return nil, fieldError("match.direction", "%q: want tx or rx", m.Direction)
	}
	if m.QPN != nil {
		if *m.QPN > roce.Mask24 {
			return nil, fieldError("match.qpn", "%d does not fit the BTH's 24 bits: nothing can match", *m.QPN)
		}
		c.qpn, c.hasQPN = *m.QPN, true
	}
	// The set of opcodes the rule can match: transport ∩ opcodes ∩ classes.
	for o := range 256 {
		c.opcodes[o] = roce.Opcode(o).Valid()
	}
	switch m.Transport {
	case "":
	case "rc", "ud":
		want := roce.TransportRC
		if m.Transport == "ud" {
			want = roce.TransportUD
		}
		for o := range 256 {
			c.opcodes[o] = c.opcodes[o] && roce.Opcode(o).Transport() == want
		}
	default:
		return nil, fieldError("match.transport", "%q: want rc or ud", m.Transport)
	}
	if len(m.Opcodes) > 0 {
		var in [256]bool
		for i, name := range m.Opcodes {
			op, err := parseOpcode(name)
			if err != nil {
				return nil, fieldError(fmt.Sprintf("match.opcodes[%d]", i), "%v", err)
			}
			in[op] = true
		}
		for o := range 256 {
			c.opcodes[o] = c.opcodes[o] && in[o]
		}
	}
	if len(m.Classes) > 0 {
		var in [256]bool
		for i, class := range m.Classes {
			ops, ok := classOpcodes(class)
			if !ok {
				return nil, fieldError(fmt.Sprintf("match.classes[%d]", i), "%q: want send, write, read_request, read_response, atomic, ack, nak, cm or cnp", class)
			}
			for _, op := range ops {
				in[op] = true
			}
			switch class {
			case classNAK:
				c.nak = true
			case classCM:
				c.cm = true
				if c.hasQPN && c.qpn != 1 {
					return nil, fieldError("match.classes", "CM MADs go to QP 1, but match.qpn is %d: nothing can match", c.qpn)
				}
			}
		}
		if len(m.Classes) > 1 && (c.nak || c.cm) {
			return nil, fieldError("match.classes", "nak and cm cannot be combined with other classes (write two rules)")
		}
		for o := range 256 {
			c.opcodes[o] = c.opcodes[o] && in[o]
		}
	}
	any := false
	for o := range 256 {
		any = any || c.opcodes[o]
	}
	if !any {
		return nil, fieldError("match", "transport, opcodes and classes leave no opcode: nothing can match")
	}
	if m.PSN != nil {
		if m.PSN.First > roce.Mask24 || m.PSN.Last > roce.Mask24 {
			return nil, fieldError("match.psn", "PSNs have 24 bits (at most %d)", roce.Mask24)
		}
		c.psn, c.hasPSN = *m.PSN, true
	}
	if m.Peer != "" {
		if lid, ok := cutLID(m.Peer); ok {
			v, err := strconv.ParseUint(lid, 0, 16)
			if err != nil || v == 0 || v == 0xFFFF {
				return nil, fieldError("match.peer", "%q: want lid:N with a LID from 1 to 0xfffe (unicast or multicast)", m.Peer)
			}
			c.peerLID, c.hasPeerLID = uint16(v), true
		} else {
			a, err := netip.ParseAddr(m.Peer)
			if err != nil {
				return nil, fieldError("match.peer", "%v (want an IP address, or lid:N for an InfiniBand peer)", err)
			}
			c.peer, c.hasPeer = a.Unmap(), true
		}
	}
	c.size = SizeRange{0, math.MaxUint32}
	if m.Size != nil {
		if m.Size.Min > m.Size.Max {
			return nil, fieldError("match.size", "min %d > max %d: nothing can match", m.Size.Min, m.Size.Max)
		}
		if m.Size.Min > roce.MaxPMTU && isPacketAction(r.Action.Kind) {
			return nil, fieldError("match.size.min", "%d: no packet carries more than %d bytes", m.Size.Min, roce.MaxPMTU)
		}
		c.size = *m.Size
	}
	if m.Occurrence != 0 && isPacketAction(r.Action.Kind) {
		onePSN := m.PSN != nil && m.PSN.First == m.PSN.Last
		if c.device == "" || c.dir == dirAny || !c.hasQPN || !onePSN || len(m.Opcodes) != 1 {
			return nil, fieldError("match.occurrence", "needs device, direction, qpn, one PSN and one opcode")
		}
		c.occurrence = m.Occurrence
	}
	if err := compileAction(c, &r.Action); err != nil {
		return nil, err
	}
	if err := compilePoint(c, m); err != nil {
		return nil, err
	}
	s := &r.Schedule
	if s.Probability != nil {
		p := *s.Probability
		if p < 0 || p > 1 || math.IsNaN(p) {
			return nil, fieldError("schedule.probability", "%v is not between 0 and 1", p)
		}
		c.prob = p
	} else {
		c.prob = 1
	}
	if s.Until != 0 && s.Until <= s.From {
		return nil, fieldError("schedule.until", "%v is not after schedule.from %v: the window is empty", time.Duration(s.Until), time.Duration(s.From))
	}
	c.every = max(s.Every, 1)
	return c, nil
}

func compileAction(c *rule, a *Action) error {
	params, ok := actionParams[a.Kind]
	if !ok {
		kinds := make([]string, 0, len(actionParams))
		for k := range actionParams {
			kinds = append(kinds, k)
		}
		return fieldError("action.kind", "%q: want one of %s", a.Kind, strings.Join(slices.Sorted(slices.Values(kinds)), ", "))
	}
	given := map[string]bool{
		"copies": a.Copies != 0, "delay": a.Delay != 0, "jitter": a.Jitter != 0, "frames": a.Frames != 0,
		"max_hold": a.MaxHold != 0, "offset": a.Offset != 0, "xor": a.XOR != 0, "field": a.Field != "",
		"value": a.Value != nil, "keep_icrc": a.KeepICRC, "code": a.Code != "", "timer": a.Timer != nil,
		"errno": a.Errno != 0, "status": a.Status != "", "event": a.Event != "", "duration": a.Duration != 0,
	}
	for _, p := range params {
		delete(given, p)
	}
	for p, set := range given {
		if set {
			return fieldError("action."+p, "not a parameter of %s", a.Kind)
		}
	}
	switch a.Kind {
	case ActDuplicate:
		if a.Copies < 0 || a.Copies > maxCopies {
			return fieldError("action.copies", "%d is not between 1 and %d", a.Copies, maxCopies)
		}
	case ActDelay:
		if a.Delay+a.Jitter == 0 {
			return fieldError("action.delay", "give a delay or a jitter")
		}
		if time.Duration(a.Delay+a.Jitter) > maxDelay {
			return fieldError("action.delay", "delay + jitter %v exceeds %v", time.Duration(a.Delay+a.Jitter), maxDelay)
		}
	case ActReorder:
		if a.Frames < 0 || a.Frames > maxFrames {
			return fieldError("action.frames", "%d is not between 1 and %d", a.Frames, maxFrames)
		}
		if time.Duration(a.MaxHold) > maxDelay {
			return fieldError("action.max_hold", "%v exceeds %v", time.Duration(a.MaxHold), maxDelay)
		}
	case ActCorruptPayload:
		if a.Offset < 0 || a.Offset >= roce.MaxPMTU {
			return fieldError("action.offset", "%d is not a payload offset (0..%d)", a.Offset, roce.MaxPMTU-1)
		}
		if a.XOR < 0 || a.XOR > 0xFF {
			return fieldError("action.xor", "%d is not a byte (1..255)", a.XOR)
		}
		if uint64(a.Offset) >= uint64(c.size.Max) {
			return fieldError("action.offset", "%d is beyond match.size.max %d: nothing can be corrupted", a.Offset, c.size.Max)
		}
		// Only frames with a byte at offset are candidates.
		c.size.Min = max(c.size.Min, uint32(a.Offset)+1)
	case ActRewrite:
		f, ok := rewriteFields[a.Field]
		if !ok {
			names := make([]string, 0, len(rewriteFields))
			for n := range rewriteFields {
				names = append(names, n)
			}
			return fieldError("action.field", "%q is not a field a rewrite can set (%s)", a.Field, strings.Join(slices.Sorted(slices.Values(names)), ", "))
		}
		if a.Value == nil {
			return fieldError("action.value", "missing")
		}
		if f.bits < 64 && *a.Value >= 1<<f.bits {
			return fieldError("action.value", "%d does not fit %s's %d bits", *a.Value, a.Field, f.bits)
		}
		c.rewrite = f
		if f.header != 0 {
			// Only packets that carry the header are candidates.
			has := false
			for o := range 256 {
				if c.opcodes[o] {
					info, _ := roce.Opcode(o).Info()
					c.opcodes[o] = info.Headers&f.header != 0
					has = has || c.opcodes[o]
				}
			}
			if !has {
				return fieldError("action.field", "no opcode the rule matches carries %s: nothing can be rewritten", a.Field)
			}
		}
	}
	return nil
}

// cutLID returns N of a peer written "lid:N" (any case).
func cutLID(peer string) (string, bool) {
	if len(peer) > 4 && strings.EqualFold(peer[:4], "lid:") {
		return peer[4:], true
	}
	return "", false
}

func parseOpcode(s string) (roce.Opcode, error) {
	if op, ok := opcodesByName[strings.ToUpper(s)]; ok {
		return op, nil
	}
	if v, err := strconv.ParseUint(s, 0, 8); err == nil {
		if op := roce.Opcode(v); op.Valid() {
			return op, nil
		}
		return 0, fmt.Errorf("%q is not an opcode of the RoCEv2 table", s)
	}
	return 0, fmt.Errorf("%q is not an opcode name (such as RC_SEND_ONLY) or number", s)
}
