// Package fault models the faults of a network link between emulated HCAs:
// the packet-level part of fault injection. A Plan is a list of rules, each
// match → action → schedule; an Injector applies a plan to the frames that
// cross the fabric as a fabric.Decorator, following the fabric's frame
// ownership rules (a dropped frame is released, a duplicate is a clone, a
// delayed or reordered frame is held off the sender's goroutine and passed
// on later, or released at Close).
//
// A rule matches a RoCEv2 frame by the device it leaves (tx) or reaches
// (rx), the BTH destination QP, transport, opcode or opcode class, PSN
// range, peer IP address and payload size; the same plan applies to the
// packets of an emulated InfiniBand subnet (Injector.SubnetDecorator, an
// emu/ib/subnet decorator), matched the same way from the BTH on, the
// device being the port's name and the peer a LID ("lid:N"); its packet action drops,
// duplicates, delays, reorders, corrupts the ICRC, corrupts the payload under
// a recomputed (valid) ICRC, or rewrites a header field; its schedule skips
// the first n matches, fires on every n-th, with a probability drawn from the
// plan's seeded generator, at most k times, inside a time window, and may arm
// or disarm other rules. Decisions depend on the order of frames, not on
// wall-clock time (except the explicit time window and delays), so a plan
// and seed on the same traffic fire at the same frames.
//
// Every firing is counted per rule and written as one JSON line to the
// fault log; Replay turns a log back into a plan that fires exactly those
// faults again. Control serves live changes to the plan (add, rm, enable,
// disable, list, stats, clear) as JSON lines on a unix socket.
//
// The same rules also act inside the HCAs: Injector.Device gives each HCA
// an hca.FaultHook, which a device model asks at its fault points (a
// command about to run, a completion about to be written, the RC responder
// about to answer a request, the DMA to a work request's buffers). A rule
// whose action is a transport action (NAK, RNR NAK, ACK suppression) or a
// device action (completion status, QP/CQ/SRQ errors, failed command or
// DMA, port flap, GID change, DEVICE_FATAL) is asked there, with the same
// schedule, counters, log and replay; the device owns the states the
// actions change.
//
// The package parses frames with package roce (read-only views, plus the
// ICRC helpers for the actions that rewrite bytes), and IB packets with
// package ib (the LRH and GRH, the ICRC and VCRC it recomputes).
package fault
