package fault

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/roce"
)

// The device and transport actions: rules asked by an HCA at its fault
// points (hca.FaultHook) instead of by the fabric. They share the rule
// language, the schedule, the counters, the log and replay with the packet
// actions.

// pointFrame is the fabric's "point": a packet action's rules see frames.
const pointFrame hca.FaultPoint = 0

var pointsByName = map[string]hca.FaultPoint{
	"command": hca.FaultAtCommand, "completion": hca.FaultAtCompletion,
	"responder": hca.FaultAtResponder, "dma": hca.FaultAtDMA,
}

// actionPoints lists where each device or transport action may fire; the
// first is its default point.
var actionPoints = map[string][]hca.FaultPoint{
	ActNAK:            {hca.FaultAtResponder},
	ActRNRNAK:         {hca.FaultAtResponder},
	ActSuppressACK:    {hca.FaultAtResponder},
	ActFailCommand:    {hca.FaultAtCommand},
	ActCompleteStatus: {hca.FaultAtCompletion},
	ActFailDMA:        {hca.FaultAtDMA},
	ActQPError:        {hca.FaultAtCompletion, hca.FaultAtResponder, hca.FaultAtDMA},
	ActCQError:        {hca.FaultAtCompletion, hca.FaultAtResponder, hca.FaultAtDMA},
	ActSRQError:       {hca.FaultAtCompletion, hca.FaultAtResponder, hca.FaultAtDMA},
	ActSRQLimit:       {hca.FaultAtCompletion, hca.FaultAtResponder, hca.FaultAtDMA},
	ActPortDown:       {hca.FaultAtCompletion, hca.FaultAtCommand, hca.FaultAtResponder, hca.FaultAtDMA},
	ActGIDChange:      {hca.FaultAtCompletion, hca.FaultAtCommand, hca.FaultAtResponder, hca.FaultAtDMA},
	ActDeviceFatal:    {hca.FaultAtCompletion, hca.FaultAtCommand, hca.FaultAtResponder, hca.FaultAtDMA},
}

// isPacketAction reports whether a kind acts on frames on the fabric.
func isPacketAction(kind string) bool {
	_, dev := actionPoints[kind]
	return !dev
}

// qpEvents are the async events a qp_error raises.
var qpEvents = map[string]hca.Event{
	"QP_FATAL": hca.EventQPFatal, "QP_REQ_ERR": hca.EventQPReqErr, "QP_ACCESS_ERR": hca.EventQPAccessErr,
}

// nakCodes are the NAK codes a nak action sends.
var nakCodes = map[string]roce.NAKCode{
	"psn_sequence_error": roce.NAKPSNSequenceError, "invalid_request": roce.NAKInvalidRequest,
	"remote_access_error": roce.NAKRemoteAccessError, "remote_operational_error": roce.NAKRemoteOperationalErr,
}

// Limits of the device actions' parameters.
const (
	maxPortDown     = 10 * time.Minute
	defaultErrno    = 22 // EINVAL
	defaultRNRTimer = 1  // 0.01 ms (timer 0 is the longest, 655 ms)
)

// compilePoint checks the match fields of the rule's point and compiles a
// device or transport action (c.spec.Action is checked for its params).
func compilePoint(c *rule, m *Match) error {
	a := &c.spec.Action
	if isPacketAction(a.Kind) {
		for _, f := range []struct {
			name string
			set  bool
		}{{"match.point", m.Point != ""}, {"match.commands", len(m.Commands) > 0},
			{"match.wr_opcodes", len(m.WROpcodes) > 0}, {"match.key", m.Key != nil}} {
			if f.set {
				return fieldError(f.name, "applies to device and transport actions, not to %s (a packet action)", a.Kind)
			}
		}
		return nil
	}
	allowed := actionPoints[a.Kind]
	c.point = allowed[0]
	if m.Point != "" {
		p, ok := pointsByName[m.Point]
		if !ok {
			return fieldError("match.point", "%q: want command, completion, responder or dma", m.Point)
		}
		if !slices.Contains(allowed, p) {
			names := make([]string, len(allowed))
			for i, o := range allowed {
				names[i] = o.String()
			}
			return fieldError("match.point", "%s does not fire at point %s (only at %s)", a.Kind, m.Point, strings.Join(names, ", "))
		}
		c.point = p
	} else {
		packetFields := m.Transport != "" || len(m.Opcodes) > 0 || len(m.Classes) > 0 || m.PSN != nil
		switch {
		case len(m.Commands) > 0 && slices.Contains(allowed, hca.FaultAtCommand):
			c.point = hca.FaultAtCommand
		case packetFields && slices.Contains(allowed, hca.FaultAtResponder):
			c.point = hca.FaultAtResponder
		case m.Key != nil && slices.Contains(allowed, hca.FaultAtDMA) && c.point != hca.FaultAtResponder:
			c.point = hca.FaultAtDMA
		}
	}
	at := c.point
	notHere := func(field string) error {
		return fieldError(field, "not known at point %s (%s): nothing can match", at, a.Kind)
	}
	switch {
	case m.Direction != "":
		return fieldError("match.direction", "%s acts inside the device, not on the wire: leave it out", a.Kind)
	case m.Peer != "":
		return fieldError("match.peer", "%s acts inside the device, not on the wire: leave it out", a.Kind)
	case m.Occurrence != 0 && (c.device == "" || m.Point == ""):
		return fieldError("match.occurrence", "at a device point, it needs device and point")
	case at != hca.FaultAtResponder && (m.Transport != "" || len(m.Opcodes) > 0 || len(m.Classes) > 0):
		return notHere("match.opcodes")
	case at != hca.FaultAtResponder && m.PSN != nil:
		return notHere("match.psn")
	case at != hca.FaultAtCommand && len(m.Commands) > 0:
		return notHere("match.commands")
	case at == hca.FaultAtCommand && m.QPN != nil:
		return notHere("match.qpn")
	case at == hca.FaultAtCommand && m.Size != nil:
		return notHere("match.size")
	case at != hca.FaultAtCompletion && at != hca.FaultAtDMA && len(m.WROpcodes) > 0:
		return notHere("match.wr_opcodes")
	case at != hca.FaultAtDMA && at != hca.FaultAtResponder && m.Key != nil:
		return notHere("match.key")
	}
	if at == hca.FaultAtResponder {
		if m.Size != nil && m.Size.Min > roce.MaxPMTU {
			return fieldError("match.size.min", "%d: no packet carries more than %d bytes", m.Size.Min, roce.MaxPMTU)
		}
		// Only RC requests reach the responder.
		any := false
		for o := range 256 {
			op := roce.Opcode(o)
			info, ok := op.Info()
			c.opcodes[o] = c.opcodes[o] && ok && op.Transport() == roce.TransportRC && !info.Response && info.Op != roce.OpCNP
			any = any || c.opcodes[o]
		}
		if !any || c.nak || c.cm {
			return fieldError("match", "the opcodes left are no RC requests: nothing reaches the responder")
		}
	}
	for i, name := range m.Commands {
		if c.commands == nil {
			c.commands, c.commandOps = map[string]bool{}, map[uint32]bool{}
		}
		if err := parseCommand(name, c.commands, c.commandOps); err != nil {
			return fieldError(fmt.Sprintf("match.commands[%d]", i), "%v", err)
		}
		c.hasCommands = true
	}
	for i, name := range m.WROpcodes {
		if !slices.Contains(hca.WROpcodeNames[:], strings.ToLower(name)) || name == "" {
			return fieldError(fmt.Sprintf("match.wr_opcodes[%d]", i), "%q: want one of %s", name, strings.Join(slices.DeleteFunc(slices.Clone(hca.WROpcodeNames[:]), func(s string) bool { return s == "" }), ", "))
		}
		c.wrOps = append(c.wrOps, strings.ToLower(name))
	}
	if m.Key != nil {
		c.key, c.hasKey = *m.Key, true
	}
	c.occurrence = m.Occurrence
	return compileDeviceAction(c, a)
}

// compileDeviceAction fills c.devAct.
func compileDeviceAction(c *rule, a *Action) error {
	act := &c.devAct
	switch a.Kind {
	case ActNAK:
		code, ok := nakCodes[a.Code]
		if !ok {
			return fieldError("action.code", "%q: want psn_sequence_error, invalid_request, remote_access_error or remote_operational_error", a.Code)
		}
		act.Kind, act.NAK = hca.FaultNAK, code
	case ActRNRNAK:
		act.Kind, act.RNRTimer = hca.FaultRNRNAK, defaultRNRTimer
		if a.Timer != nil {
			if *a.Timer < 0 || *a.Timer > 31 {
				return fieldError("action.timer", "%d is not an RNR timer code (0..31)", *a.Timer)
			}
			act.RNRTimer = uint8(*a.Timer)
		}
	case ActSuppressACK:
		act.Kind = hca.FaultSuppressACK
	case ActFailCommand:
		act.Kind, act.Errno = hca.FaultFailCommand, defaultErrno
		if a.Errno != 0 {
			if a.Errno < 1 || a.Errno > 255 {
				return fieldError("action.errno", "%d is not an errno (1..255)", a.Errno)
			}
			act.Errno = uint32(a.Errno)
		}
	case ActCompleteStatus:
		name := strings.TrimPrefix(strings.ToUpper(a.Status), "IBV_WC_")
		i := slices.Index(hca.WCStatusNames[:], name)
		if i < 0 {
			return fieldError("action.status", "%q is not an ibv_wc_status (IBV_WC_SUCCESS … IBV_WC_GENERAL_ERR)", a.Status)
		}
		act.Kind, act.Status = hca.FaultCompleteStatus, uint32(i)
	case ActQPError:
		act.Kind, act.Event = hca.FaultQPError, hca.EventQPFatal
		if a.Event != "" {
			ev, ok := qpEvents[strings.ToUpper(a.Event)]
			if !ok {
				return fieldError("action.event", "%q: want QP_FATAL, QP_REQ_ERR or QP_ACCESS_ERR", a.Event)
			}
			act.Event = ev
		}
	case ActCQError:
		act.Kind = hca.FaultCQError
	case ActSRQError:
		act.Kind = hca.FaultSRQError
	case ActSRQLimit:
		act.Kind = hca.FaultSRQLimit
	case ActFailDMA:
		act.Kind = hca.FaultFailDMA
	case ActPortDown:
		if a.Duration == 0 || time.Duration(a.Duration) > maxPortDown {
			return fieldError("action.duration", "%v: give how long the port stays down (up to %v)", time.Duration(a.Duration), maxPortDown)
		}
		act.Kind, act.Duration = hca.FaultPortDown, time.Duration(a.Duration)
	case ActGIDChange:
		act.Kind = hca.FaultGIDChange
	case ActDeviceFatal:
		act.Kind = hca.FaultDeviceFatal
	}
	return nil
}

// parseCommand adds the command s names to names (a command some device
// model has, by its name, with or without the model's prefix) or ops (a
// number: the opcode of whichever model the HCA has).
func parseCommand(s string, names map[string]bool, ops map[uint32]bool) error {
	if name, ok := hca.CommandName(s); ok {
		names[name] = true
		return nil
	}
	if v, err := strconv.ParseUint(s, 0, 32); err == nil {
		ops[uint32(v)] = true
		return nil
	}
	return fmt.Errorf("%q is not a command (%s; or its number)", s, hca.CommandNames())
}

// matchDevice reports whether the rule matches an event at device's point.
func (r *rule) matchDevice(device string, ev *hca.FaultEvent, occ uint64) bool {
	if !r.armed || r.point != ev.Point || (r.device != "" && r.device != device) {
		return false
	}
	if r.occurrence != 0 && r.occurrence != occ {
		return false
	}
	if ev.Point == hca.FaultAtCommand {
		return !r.hasCommands || r.commands[ev.Command.Name] || r.commandOps[ev.Command.Op]
	}
	if r.hasQPN && ev.QPN != r.qpn {
		return false
	}
	if ev.Size < r.size.Min || ev.Size > r.size.Max {
		return false
	}
	if len(r.wrOps) > 0 && !slices.Contains(r.wrOps, ev.WROpcode) {
		return false
	}
	if r.hasKey && (!ev.HasKey || ev.Key != r.key) {
		return false
	}
	if ev.Point == hca.FaultAtResponder {
		if !r.opcodes[ev.Opcode] || (r.hasPSN && !roce.PSNInRange(ev.PSN, r.psn.First, r.psn.Last)) {
			return false
		}
	}
	return true
}

// deviceHook is an Injector as one HCA's hca.FaultHook.
type deviceHook struct {
	inj  *Injector
	name string
}

// Device returns the fault hook of the HCA called name (a device model's Config.Faults):
// the plan's device and transport actions for that HCA.
func (inj *Injector) Device(name string) hca.FaultHook { return deviceHook{inj, name} }

type devKey struct {
	device string
	point  hca.FaultPoint
}

// Fault implements hca.FaultHook: the first rule that fires decides.
func (h deviceHook) Fault(ev *hca.FaultEvent) hca.FaultAction {
	inj := h.inj
	if inj.ndev.Load() == 0 {
		return hca.FaultAction{}
	}
	inj.mu.Lock()
	defer inj.mu.Unlock()
	key := devKey{h.name, ev.Point}
	inj.devOcc[key]++
	occ := inj.devOcc[key]
	for _, r := range inj.rules {
		if !r.matchDevice(h.name, ev, occ) {
			continue
		}
		r.matched++
		if !inj.fires(r) {
			continue
		}
		a := r.spec.Action
		line := logLine{Rule: r.spec.Name, Device: h.name, Point: ev.Point.String(), Occurrence: occ, Action: &a}
		switch ev.Point {
		case hca.FaultAtCommand:
			line.Command = ev.Command.String()
		case hca.FaultAtResponder:
			qpn, psn := ev.QPN, ev.PSN
			line.QPN, line.PSN, line.Opcode = &qpn, &psn, ev.Opcode.String()
		default:
			qpn := ev.QPN
			line.QPN, line.WROpcode = &qpn, ev.WROpcode
		}
		inj.writeLog(line)
		return r.devAct
	}
	return hca.FaultAction{}
}
