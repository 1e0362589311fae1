// Package hca is what every emulated HCA shares, whatever its device model
// (PVRDMA, mlx5): the vocabulary the device models, the fault injector, the
// CLI's inspect, trace and metrics speak, typed by the core and not by a
// model's formats. Commands are named by the model (a number and the
// model's own name), async events and completion statuses by the verbs,
// counters, findings and trace events the same for every model; each model
// converts its own values with explicit mapping functions.
//
// Of the core's machinery, the loans of payloads between HCAs (Lender,
// LentPayload) and QP numbering (QPNs) are here; the engine, the wire and
// the model-neutral QP are still written in package emu, as methods of the
// PVRDMA device, and move here in steps (docs/architecture.md).
package hca
