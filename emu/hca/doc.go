// Package hca is what every emulated HCA shares, whatever its device model
// (PVRDMA, mlx5): the vocabulary the device models, the fault injector, the
// CLI's inspect, trace and metrics speak, typed by the core and not by a
// model's formats. Commands are named by the model (a number and the
// model's own name), async events and completion statuses by the verbs,
// counters, findings and trace events the same for every model; each model
// converts its own values with explicit mapping functions.
//
// Of the core's machinery, these are here: Core (the device lock, with the
// interrupts raised under it sent after; the engine that runs a device's
// work off the vCPUs: doorbell kicks, frames, batches from the other HCAs
// and the sending HCA's help with them, timers; a device fatal on a panic),
// driving its device model through the Model interface; the loans of
// payloads between HCAs (Lender, LentPayload); QP numbering (QPNs). The wire
// (framing, batches out, demux to QPs) and the model-neutral QP are still
// written in package emu, as methods of the PVRDMA device, and move here
// next (docs/architecture.md).
package hca
