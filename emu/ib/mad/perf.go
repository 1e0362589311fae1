package mad

import "errors"

// The port's Performance Management agent as far as MAD_IFC reaches it
// (IBA 16.1): mlx5_ib answers PortCounters and PortCountersExtended
// itself (from the device's counters) and passes the rest of the class to
// the firmware, which ib_core asks for ClassPortInfo when it makes a
// port's sysfs counters (get_counter_table).

// PerfClassVersion is the Performance Management class version.
const PerfClassVersion = 1

// PerfDataOffset is where a Performance Management MAD's attribute
// starts: after the common header and 40 reserved bytes (IBA 16.1.1).
const PerfDataOffset = HeaderSize + 40

// ErrNotPerf is a MAD AnswerPerf does not take: not a Performance
// Management request.
var ErrNotPerf = errors.New("mad: not a Performance Management request")

// AnswerPerf answers a Performance Management MAD into resp (Size bytes):
// ClassPortInfo Get with no optional counters (capability mask 0: ib_core
// then reads the 32-bit PortCounters); any other attribute or method gets
// its error status, a bad version BAD_VERSION. Responses and traps get
// ErrNotPerf, as does another class.
func AnswerPerf(req, resp []byte) error {
	if len(req) < Size || len(resp) < Size {
		return ErrShortBuffer
	}
	h, err := DecodeHeader(req)
	if err != nil {
		return err
	}
	if h.MgmtClass != ClassPerf || h.IsResponse() || h.Method == MethodTrap || h.Method == MethodTrapRepress {
		return ErrNotPerf
	}
	clear(resp[:Size])
	status := uint16(StatusOK)
	switch {
	case h.BaseVersion != BaseVersion || h.ClassVersion != PerfClassVersion:
		status = StatusBadVersion
	case h.Method != MethodGet:
		status = StatusMethodUnsupported
	case h.AttrID != AttrClassPortInfo:
		status = StatusAttrUnsupported
	default:
		cpi := ClassPortInfo{BaseVersion: BaseVersion, ClassVersion: PerfClassVersion, RespTimeValue: 18}
		if err := cpi.Encode(resp[PerfDataOffset:]); err != nil {
			return err
		}
	}
	h.Method, h.Status = MethodGetResp, status
	return h.Encode(resp)
}
