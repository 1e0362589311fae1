package hca

import (
	"fmt"

	"github.com/hcaemu/hcaemu/emu/transport"
)

// Event is an asynchronous event as the verbs name it (enum ibv_event_type
// and ib_event_type share these numbers); each model maps it to its own
// event queue entries.
type Event uint8

// The events.
const (
	EventCQErr Event = iota
	EventQPFatal
	EventQPReqErr
	EventQPAccessErr
	EventCommEst
	EventSQDrained
	EventPathMig
	EventPathMigErr
	EventDeviceFatal
	EventPortActive
	EventPortErr
	EventLIDChange
	EventPKeyChange
	EventSMChange
	EventSRQErr
	EventSRQLimitReached
	EventQPLastWQEReached
	EventClientReregister
	EventGIDChange
	NumEvents
)

var eventNames = [NumEvents]string{
	"CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST", "SQ_DRAINED", "PATH_MIG",
	"PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR", "LID_CHANGE", "PKEY_CHANGE", "SM_CHANGE",
	"SRQ_ERR", "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED", "CLIENT_REREGISTER", "GID_CHANGE",
}

func (e Event) String() string {
	if e < NumEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("Event(%d)", e)
}

// QPErrorEvent is the async event of a QP error its transport reports
// (QP_FATAL for one it has no name for).
func QPErrorEvent(ev transport.Event) Event {
	switch ev {
	case transport.EventQPRequestErr:
		return EventQPReqErr
	case transport.EventQPAccessError:
		return EventQPAccessErr
	}
	return EventQPFatal
}
