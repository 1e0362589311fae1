package fault

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hcaemu/hcaemu/emu/fabric"
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/ib"
	"github.com/hcaemu/hcaemu/emu/ib/subnet"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// direction is a frame's direction relative to a device.
type direction uint8

const (
	dirAny direction = iota
	dirTx
	dirRx
)

func (d direction) String() string {
	switch d {
	case dirTx:
		return "tx"
	case dirRx:
		return "rx"
	}
	return ""
}

// rule is a compiled rule with its state.
type rule struct {
	spec Rule

	device     string
	dir        direction
	qpn        uint32
	hasQPN     bool
	opcodes    [256]bool
	nak, cm    bool
	psn        PSNRange
	hasPSN     bool
	peer       netip.Addr
	hasPeer    bool
	peerLID    uint16 // "lid:N": the IB peer's LID
	hasPeerLID bool
	size       SizeRange
	occurrence uint64
	rewrite    rewriteField
	prob       float64
	every      uint64

	// Device and transport actions: where the rule is asked and what it
	// answers (point 0: a packet action, asked by the fabric).
	point       hca.FaultPoint
	devAct      hca.FaultAction
	commands    map[string]bool // by the core's name (hca.Command)
	commandOps  map[uint32]bool // by the model's opcode number
	hasCommands bool
	wrOps       []string
	key         uint32
	hasKey      bool

	armed   bool
	rng     *rand.Rand
	matched uint64
	fired   uint64
}

// Options configure an Injector.
type Options struct {
	// Seed, when set, overrides the plan's seed.
	Seed *uint64
	// Log receives one JSON line per firing (and one at start with the
	// seed); nil: no log.
	Log io.Writer
}

// Injector applies a plan to the frames crossing the fabric. It is safe for
// concurrent use: every port's sender calls it, and live control changes
// its rules.
type Injector struct {
	seed  uint64
	start time.Time
	nrule atomic.Int32 // len(rules), read without mu on the fast path
	ndev  atomic.Int32 // rules asked at device points, for the devices' fast path
	// nreorder is len(byPort): reorder holds count the frames passing
	// them even when the rules are gone.
	nreorder atomic.Int32

	mu     sync.Mutex
	rules  []*rule
	byName map[string]*rule
	added  int // rules added so far, for default names
	log    io.Writer
	logErr error
	fired  uint64

	// occurrences counts frames per (device, direction, QPN, PSN,
	// opcode), for the log and for Match.Occurrence; frameNo orders
	// frames for the eviction of stale keys.
	occ     map[occKey]*occCount
	frameNo uint64
	// devOcc numbers the events of each device point, for the log and
	// for Match.Occurrence at a device point.
	devOcc map[devKey]uint64

	held    map[*heldFrame]struct{}
	byPort  map[any][]*heldFrame // reorder holds per sender (route.sender), oldest first
	closed  bool
	senders sync.WaitGroup // timer callbacks passing held frames on
}

type occKey struct {
	device string
	dir    direction
	qpn    uint32
	psn    uint32
	op     roce.Opcode
}

type occCount struct {
	n    uint64
	last uint64 // frameNo of the last frame with this key
}

// maxOccKeys bounds the occurrence table: beyond it, the keys not seen in
// the last maxOccKeys/2 frames are forgotten (a retransmission comes much
// sooner than that).
const maxOccKeys = 1 << 16

// heldFrame is a frame a delay or reorder action keeps.
type heldFrame struct {
	route
	frame     []byte
	timer     *time.Timer
	remaining int // reorder: frames of the same sender still to pass it
}

// route is where a frame goes on from a decorator: an Ethernet frame
// through the fabric's link, or an InfiniBand packet (ibNext set) through
// the subnet's.
type route struct {
	ethFrom *fabric.Port
	ethNext fabric.Link
	ibFrom  *subnet.Port
	ibNext  subnet.Link
}

// send passes a frame on.
func (rt *route) send(frame []byte) bool {
	if rt.ibNext != nil {
		return rt.ibNext.Send(rt.ibFrom, frame)
	}
	return rt.ethNext.Send(rt.ethFrom, frame)
}

// sender is the port that sent the frame, the key of the reorder holds.
func (rt *route) sender() any {
	if rt.ibNext != nil {
		return rt.ibFrom
	}
	return rt.ethFrom
}

// NewInjector compiles a plan. The seed is opts.Seed, else the plan's, else
// taken from the clock; Seed reports it.
func NewInjector(plan *Plan, opts Options) (*Injector, error) {
	if plan == nil {
		plan = &Plan{}
	}
	p := *plan
	p.Rules = append([]Rule(nil), plan.Rules...)
	rules, err := compilePlan(&p)
	if err != nil {
		return nil, err
	}
	seed := uint64(time.Now().UnixNano())
	switch {
	case opts.Seed != nil:
		seed = *opts.Seed
	case p.Seed != nil:
		seed = *p.Seed
	}
	inj := &Injector{seed: seed, start: time.Now(), byName: map[string]*rule{}, log: opts.Log,
		occ: map[occKey]*occCount{}, devOcc: map[devKey]uint64{}, held: map[*heldFrame]struct{}{}, byPort: map[any][]*heldFrame{}}
	for _, r := range rules {
		inj.install(r)
	}
	inj.added = len(rules)
	inj.writeLog(logLine{Event: "start", Seed: &inj.seed, Rules: len(rules)})
	return inj, nil
}

// Seed returns the seed of the plan's generator.
func (inj *Injector) Seed() uint64 { return inj.seed }

// install adds a compiled rule (mu held or not yet shared).
func (inj *Injector) install(r *rule) {
	h := fnv.New64a()
	h.Write([]byte(r.spec.Name))
	// Each rule draws from its own stream of the plan's seed, so a rule's
	// decisions depend only on the frames it matches.
	r.rng = rand.New(rand.NewPCG(inj.seed, h.Sum64()))
	inj.rules = append(inj.rules, r)
	inj.byName[r.spec.Name] = r
	inj.nrule.Store(int32(len(inj.rules)))
	inj.countDev()
}

// countDev counts the rules asked at device points (mu held).
func (inj *Injector) countDev() {
	n := 0
	for _, r := range inj.rules {
		if r.point != pointFrame {
			n++
		}
	}
	inj.ndev.Store(int32(n))
}

// Decorator returns the fabric decorator that applies the plan to every
// frame crossing the link.
func (inj *Injector) Decorator() fabric.Decorator {
	return func(next fabric.Link) fabric.Link {
		return fabric.LinkFunc(func(from *fabric.Port, frame []byte) bool {
			return inj.send(next, from, frame)
		})
	}
}

// SubnetDecorator returns the InfiniBand subnet decorator that applies
// the same plan (the same rules, schedule, counters and log) to every
// packet crossing the subnet's link: the fabric of emulated InfiniBand
// ports, whose packets rules see as they see RoCEv2 frames (BTH onward),
// with the peer a LID.
func (inj *Injector) SubnetDecorator() subnet.Decorator {
	return func(next subnet.Link) subnet.Link {
		return subnet.LinkFunc(func(from *subnet.Port, pkt []byte) bool {
			return inj.sendIB(next, from, pkt)
		})
	}
}

// frameView is a parsed frame, as rules see it.
type frameView struct {
	from, to string // device names; to is "" when nobody owns the destination
	u        roce.Unframed
	p        roce.Packet
	// An InfiniBand packet: the whole packet (LRH through VCRC) and its
	// LRH; nil for a RoCEv2 frame.
	ibPkt []byte
	lrh   ib.LRH
	occTx uint64
	occRx uint64
}

// verdict is what the rules decided for a frame.
type verdict struct {
	drop    bool
	hold    *heldFrame
	delay   time.Duration
	copies  int
	release []*heldFrame // reorder holds this frame releases
}

// Quiet reports whether the injector would pass a frame on untouched and
// unlooked at now (no rule, no frame held): HCAs may then send to each
// other without frames (fabric.Switch.AllowDirect). Once a rule is added,
// packets go as frames again, and the rule sees them.
func (inj *Injector) Quiet() bool { return inj.nrule.Load() == 0 && inj.nreorder.Load() == 0 }

func (inj *Injector) send(next fabric.Link, from *fabric.Port, frame []byte) bool {
	if inj.Quiet() {
		return next.Send(from, frame)
	}
	var v frameView
	var err error
	if v.u, err = roce.Unframe(frame); err == nil {
		v.p, err = roce.Parse(v.u.IB)
	}
	if err != nil {
		return next.Send(from, frame) // not RoCEv2: no rule applies
	}
	v.from = from.Name()
	if sw := from.Switch(); sw != nil {
		v.to, _ = sw.Owner(v.u.DstIP)
	}
	return inj.apply(&v, route{ethFrom: from, ethNext: next}, frame)
}

// sendIB is send for an InfiniBand packet (LRH through VCRC) crossing a
// subnet. Like a RoCEv2 frame's, its CRCs are not checked: a packet whose
// LRH, GRH or transport headers do not parse (ib.ParseLink, roce.Parse)
// is passed on untouched.
func (inj *Injector) sendIB(next subnet.Link, from *subnet.Port, pkt []byte) bool {
	if inj.Quiet() {
		return next.Send(from, pkt)
	}
	var v frameView
	lrh, grh, err := ib.ParseLink(pkt)
	if err == nil {
		// ParseLink checked that the packet holds its headers, a BTH, the
		// ICRC and the VCRC.
		v.p, err = roce.Parse(pkt[ib.HeaderLen(grh != nil) : len(pkt)-ib.VCRCSize])
	}
	if err != nil {
		return next.Send(from, pkt) // not an IBA transport packet: no rule applies
	}
	v.ibPkt, v.lrh = pkt, lrh
	v.from = from.Name()
	if s := from.Subnet(); s != nil {
		v.to, _ = s.Owner(lrh.DLID())
	}
	return inj.apply(&v, route{ibFrom: from, ibNext: next}, pkt)
}

// apply runs the rules on a parsed frame and carries out their verdict.
func (inj *Injector) apply(v *frameView, rt route, frame []byte) bool {
	inj.mu.Lock()
	vd := inj.decide(v, rt, frame)
	inj.mu.Unlock()

	if vd.drop {
		fabric.Release(frame)
		return true // lost on the wire
	}
	if vd.hold != nil {
		return true
	}
	ok := rt.send(frame)
	for range vd.copies {
		rt.send(clonePacket(frame))
	}
	for _, h := range vd.release {
		h.send(h.frame)
	}
	return ok
}

// clonePacket is a copy of frame for a duplicate: from the fabric's pool,
// or of its own when longer than a pool buffer.
func clonePacket(frame []byte) []byte {
	if len(frame) <= fabric.FrameSize {
		return fabric.Clone(frame)
	}
	return append([]byte(nil), frame...)
}

// decide runs the rules on a frame (mu held). It may change the frame's
// bytes (corruption, rewrite) and take it (drop, hold).
func (inj *Injector) decide(v *frameView, rt route, frame []byte) verdict {
	var vd verdict
	inj.frameNo++
	op := v.p.Opcode()
	qpn, psn := v.p.BTH.DestQP(), v.p.BTH.PSN()
	v.occTx = inj.count(occKey{v.from, dirTx, qpn, psn, op})
	if v.to != "" {
		v.occRx = inj.count(occKey{v.to, dirRx, qpn, psn, op})
	}
	for _, r := range inj.rules {
		if r.point != pointFrame {
			continue
		}
		side, ok := r.match(v)
		if !ok {
			continue
		}
		r.matched++
		if !inj.fires(r) {
			continue
		}
		a := &r.spec.Action
		line := logLine{Rule: r.spec.Name, Dir: side.String(), QPN: &qpn, PSN: &psn, Opcode: op.String(), Action: a}
		line.Device, line.Occurrence = v.from, v.occTx
		if side == dirRx {
			line.Device, line.Occurrence = v.to, v.occRx
		}
		if v.ibPkt != nil {
			line.SLID, line.DLID = v.lrh.SLID(), v.lrh.DLID()
		}
		switch a.Kind {
		case ActDrop:
			vd.drop = true
		case ActDuplicate:
			vd.copies += max(a.Copies, 1)
		case ActDelay:
			d := time.Duration(a.Delay)
			if a.Jitter > 0 {
				d += time.Duration(r.rng.Int64N(int64(a.Jitter) + 1))
			}
			line.Delay = Duration(d)
			vd.delay = d
			vd.hold = &heldFrame{route: rt, frame: frame}
		case ActReorder:
			vd.hold = &heldFrame{route: rt, frame: frame, remaining: max(a.Frames, 1)}
			vd.delay = time.Duration(a.MaxHold)
			if vd.delay == 0 {
				vd.delay = defaultMaxHold
			}
		case ActCorruptICRC:
			icrc := v.p.ICRC
			for i := range icrc {
				icrc[i] ^= 0xFF
			}
			// On IB, the link's VCRC is valid (it is recomputed on every
			// link): the receiver finds the ICRC wrong.
			fixVCRC(v)
		case ActCorruptPayload:
			x := byte(a.XOR)
			if x == 0 {
				x = 0xFF
			}
			v.p.Payload[a.Offset] ^= x
			fixICRC(v)
		case ActRewrite:
			r.rewrite.set(&v.p, *a.Value)
			if !a.KeepICRC {
				fixICRC(v)
			} else {
				fixVCRC(v)
			}
			// The later rules see the packet as rewritten (another opcode
			// has other headers); one that no longer parses is passed on
			// as it is.
			p, err := roce.Parse(v.transport())
			v.p = p
			if err != nil {
				inj.writeLog(line)
				return inj.settle(vd, rt.sender())
			}
		}
		inj.writeLog(line)
		if vd.drop || vd.hold != nil {
			break // the frame is gone: the later rules do not see it
		}
	}
	return inj.settle(vd, rt.sender())
}

// fires runs a matched rule's schedule, and counts and carries out
// (arm, disarm) a firing (mu held).
func (inj *Injector) fires(r *rule) bool {
	s := &r.spec.Schedule
	if s.From != 0 || s.Until != 0 {
		now := time.Since(inj.start)
		if now < time.Duration(s.From) || (s.Until != 0 && now >= time.Duration(s.Until)) {
			return false
		}
	}
	if r.matched <= s.After || (r.matched-s.After)%r.every != 0 {
		return false
	}
	if s.Times != 0 && r.fired >= s.Times {
		return false
	}
	if r.prob < 1 && r.rng.Float64() >= r.prob {
		return false
	}
	r.fired++
	inj.fired++
	for _, n := range s.Arm {
		if o := inj.byName[n]; o != nil {
			o.armed = true
		}
	}
	for _, n := range s.Disarm {
		if o := inj.byName[n]; o != nil {
			o.armed = false
		}
	}
	return true
}

// settle applies a verdict's hold and counts a frame passed on for the
// reorder holds (mu held).
func (inj *Injector) settle(vd verdict, from any) verdict {
	if vd.drop {
		vd.copies = 0
	}
	if vd.hold != nil {
		if inj.closed {
			vd.hold = nil // shutting down: pass it on now
		} else {
			inj.hold(vd.hold, vd.delay)
		}
	}
	if !vd.drop && vd.hold == nil {
		vd.release = inj.passed(from)
	}
	return vd
}

// count records one more frame with key and returns its occurrence.
func (inj *Injector) count(key occKey) uint64 {
	c := inj.occ[key]
	if c == nil {
		if len(inj.occ) >= maxOccKeys {
			for k, old := range inj.occ {
				if inj.frameNo-old.last > maxOccKeys/2 {
					delete(inj.occ, k)
				}
			}
			if len(inj.occ) >= maxOccKeys {
				clear(inj.occ) // every key is recent: a flood of distinct frames
			}
		}
		c = &occCount{}
		inj.occ[key] = c
	}
	c.n++
	c.last = inj.frameNo
	return c.n
}

// match reports whether the rule matches the frame, and on which side.
func (r *rule) match(v *frameView) (direction, bool) {
	if !r.armed {
		return dirAny, false
	}
	op := v.p.Opcode()
	if !r.opcodes[op] {
		return dirAny, false
	}
	if r.hasQPN && v.p.BTH.DestQP() != r.qpn {
		return dirAny, false
	}
	if r.hasPSN && !roce.PSNInRange(v.p.BTH.PSN(), r.psn.First, r.psn.Last) {
		return dirAny, false
	}
	if n := uint32(len(v.p.Payload)); n < r.size.Min || n > r.size.Max {
		return dirAny, false
	}
	if r.nak && v.p.AETH.Syndrome().IsACK() {
		return dirAny, false
	}
	// A CM MAD: a UD send to QP1 whose MAD header (base version, then
	// management class) names the communication manager.
	if r.cm && (v.p.BTH.DestQP() != 1 || len(v.p.Payload) < 24 || v.p.Payload[1] != 0x07) {
		return dirAny, false
	}
	var side direction
	switch {
	case r.device == "" && r.dir != dirRx:
		side = dirTx
	case r.device == "":
		side = dirRx
	case r.dir != dirRx && v.from == r.device:
		side = dirTx
	case r.dir != dirTx && v.to == r.device:
		side = dirRx
	default:
		return dirAny, false
	}
	if side == dirRx && v.to == "" {
		return dirAny, false
	}
	if r.hasPeer || r.hasPeerLID {
		// An IP peer matches RoCEv2 frames only, a LID peer IB packets
		// only.
		if v.ibPkt == nil {
			peer := v.u.DstIP
			if side == dirRx {
				peer = v.u.SrcIP
			}
			if !r.hasPeer || peer.Unmap() != r.peer {
				return dirAny, false
			}
		} else {
			lid := v.lrh.DLID()
			if side == dirRx {
				lid = v.lrh.SLID()
			}
			if !r.hasPeerLID || lid != r.peerLID {
				return dirAny, false
			}
		}
	}
	if r.occurrence != 0 {
		occ := v.occTx
		if side == dirRx {
			occ = v.occRx
		}
		if occ != r.occurrence {
			return dirAny, false
		}
	}
	return side, true
}

// fixICRC makes the ICRC valid again after a change: a RoCEv2 frame's
// (a set UDP checksum, which the change invalidates, is cleared: 0 means
// none in RoCEv2), or an IB packet's ICRC and VCRC.
func fixICRC(v *frameView) {
	if v.ibPkt != nil {
		_ = ib.PutICRC(v.ibPkt) // the headers were validated by ParseLink
		fixVCRC(v)
		return
	}
	u := &v.u
	u.UDP[6], u.UDP[7] = 0, 0
	_ = roce.PutICRC(u.IP, u.UDP, u.IB) // the headers were validated by Unframe
}

// fixVCRC makes an IB packet's VCRC valid again after a change (nothing
// for a RoCEv2 frame).
func fixVCRC(v *frameView) {
	if v.ibPkt != nil {
		_ = ib.PutVCRC(v.ibPkt)
	}
}

// transport is the frame's transport packet, BTH through ICRC.
func (v *frameView) transport() []byte {
	if v.ibPkt != nil {
		return v.ibPkt[ib.HeaderLen(v.lrh.LNH() == ib.LNHIBAGlobal) : len(v.ibPkt)-ib.VCRCSize]
	}
	return v.u.IB
}

// hold keeps a frame until its timer fires or (reorder) enough frames of
// its sender passed it (mu held).
func (inj *Injector) hold(h *heldFrame, d time.Duration) {
	inj.held[h] = struct{}{}
	if h.remaining > 0 {
		k := h.sender()
		inj.byPort[k] = append(inj.byPort[k], h)
		inj.nreorder.Store(int32(len(inj.byPort)))
	}
	h.timer = time.AfterFunc(d, func() {
		inj.mu.Lock()
		if !inj.unhold(h) {
			inj.mu.Unlock()
			return
		}
		inj.senders.Add(1)
		inj.mu.Unlock()
		defer inj.senders.Done()
		h.send(h.frame)
	})
}

// unhold forgets a held frame; false if it was already released (mu held).
func (inj *Injector) unhold(h *heldFrame) bool {
	if _, ok := inj.held[h]; !ok {
		return false
	}
	delete(inj.held, h)
	if h.remaining > 0 {
		k := h.sender()
		list := inj.byPort[k]
		for i, o := range list {
			if o == h {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(inj.byPort, k)
		} else {
			inj.byPort[k] = list
		}
		inj.nreorder.Store(int32(len(inj.byPort)))
	}
	return true
}

// passed counts a frame of from passed on, and returns the reordered
// frames now due, oldest first (mu held).
func (inj *Injector) passed(from any) []*heldFrame {
	list := inj.byPort[from]
	var due []*heldFrame
	for _, h := range list {
		h.remaining--
		if h.remaining <= 0 {
			due = append(due, h)
		}
	}
	for _, h := range due {
		h.timer.Stop()
		h.remaining = 1 // still listed: unhold removes it
		inj.unhold(h)
	}
	return due
}

// Close releases every held frame (they are lost, as on a link going down)
// and waits for the held frames being passed on. Frames sent afterwards
// still go through the rules but are no longer held.
func (inj *Injector) Close() error {
	inj.mu.Lock()
	inj.closed = true
	for h := range inj.held {
		h.timer.Stop()
		fabric.Release(h.frame)
	}
	clear(inj.held)
	clear(inj.byPort)
	inj.nreorder.Store(0)
	inj.mu.Unlock()
	inj.senders.Wait()
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return inj.logErr
}

// Held reports how many frames are held now (for tests and stats).
func (inj *Injector) Held() int {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return len(inj.held)
}

// logLine is one line of the fault log.
type logLine struct {
	Time   string  `json:"time"`
	Event  string  `json:"event,omitempty"` // "start": the first line, with the seed
	Seed   *uint64 `json:"seed,omitempty"`
	Rules  int     `json:"rules,omitempty"`
	Rule   string  `json:"rule,omitempty"`
	Device string  `json:"device,omitempty"`
	Dir    string  `json:"dir,omitempty"`
	QPN    *uint32 `json:"qpn,omitempty"`
	PSN    *uint32 `json:"psn,omitempty"`
	Opcode string  `json:"opcode,omitempty"`
	// An InfiniBand packet's LRH source and destination LIDs (none for a
	// RoCEv2 frame).
	SLID       uint16   `json:"slid,omitempty"`
	DLID       uint16   `json:"dlid,omitempty"`
	Occurrence uint64   `json:"occurrence,omitempty"`
	Delay      Duration `json:"delay,omitempty"` // a delay action: the delay drawn
	// Device and transport actions: the point, and the command or work
	// request it saw (Occurrence numbers the events of the point).
	Point    string  `json:"point,omitempty"`
	Command  string  `json:"command,omitempty"`
	WROpcode string  `json:"wr_opcode,omitempty"`
	Action   *Action `json:"action,omitempty"`
}

// writeLog writes one log line (mu held, or before the injector is
// shared). A write error stops the log, not the faults; Close reports it.
func (inj *Injector) writeLog(line logLine) {
	if inj.log == nil || inj.logErr != nil {
		return
	}
	line.Time = time.Now().UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(line)
	if err == nil {
		_, err = inj.log.Write(append(b, '\n'))
	}
	if err != nil {
		inj.logErr = fmt.Errorf("fault log: %w", err)
	}
}

// RuleState is a rule with its state and counters.
type RuleState struct {
	Rule
	Armed   bool   `json:"armed"`
	Matched uint64 `json:"matched"`
	Fired   uint64 `json:"fired"`
}

// Stats are the injector's counters.
type Stats struct {
	Seed  uint64      `json:"seed"`
	Fired uint64      `json:"fired"`
	Held  int         `json:"held"`
	Rules []RuleState `json:"rules"`
}

// Stats returns the counters of every rule, in plan order.
func (inj *Injector) Stats() Stats {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	s := Stats{Seed: inj.seed, Fired: inj.fired, Held: len(inj.held), Rules: []RuleState{}}
	for _, r := range inj.rules {
		s.Rules = append(s.Rules, RuleState{Rule: r.spec, Armed: r.armed, Matched: r.matched, Fired: r.fired})
	}
	return s
}

// Errors of the live operations.
var (
	ErrNoRule     = errors.New("no such rule")
	ErrDuplicate  = errors.New("a rule with that name exists")
	ErrReferenced = errors.New("the rule is armed or disarmed by another rule")
)

// Add appends a rule (checked as a plan's rules are; its arm and disarm
// names must exist or be the rule itself). A rule without a name gets
// "rule<n>". It returns the rule's name.
func (inj *Injector) Add(r Rule) (string, error) {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	if r.Name == "" {
		for {
			r.Name = fmt.Sprintf("rule%d", inj.added)
			inj.added++
			if inj.byName[r.Name] == nil {
				break
			}
		}
	}
	if inj.byName[r.Name] != nil {
		return "", fmt.Errorf("rule %q: %w", r.Name, ErrDuplicate)
	}
	c, err := compileRule(&r)
	if err != nil {
		return "", fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if err := checkRefs(r, func(n string) bool { return n == r.Name || inj.byName[n] != nil }); err != nil {
		return "", fmt.Errorf("rule %q: %w", r.Name, err)
	}
	inj.install(c)
	return r.Name, nil
}

// Remove deletes a rule no other rule arms or disarms.
func (inj *Injector) Remove(name string) error {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	r := inj.byName[name]
	if r == nil {
		return fmt.Errorf("rule %q: %w", name, ErrNoRule)
	}
	for _, o := range inj.rules {
		if o == r {
			continue
		}
		for _, n := range append(append([]string(nil), o.spec.Schedule.Arm...), o.spec.Schedule.Disarm...) {
			if n == name {
				return fmt.Errorf("rule %q: %w (%q)", name, ErrReferenced, o.spec.Name)
			}
		}
	}
	for i, o := range inj.rules {
		if o == r {
			inj.rules = append(inj.rules[:i:i], inj.rules[i+1:]...)
			break
		}
	}
	delete(inj.byName, name)
	inj.nrule.Store(int32(len(inj.rules)))
	inj.countDev()
	return nil
}

// SetArmed arms (enables) or disarms (disables) a rule.
func (inj *Injector) SetArmed(name string, armed bool) error {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	r := inj.byName[name]
	if r == nil {
		return fmt.Errorf("rule %q: %w", name, ErrNoRule)
	}
	r.armed = armed
	return nil
}

// Clear removes every rule. Held frames stay held until their time.
func (inj *Injector) Clear() {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	inj.rules = nil
	clear(inj.byName)
	inj.nrule.Store(0)
	inj.ndev.Store(0)
}
