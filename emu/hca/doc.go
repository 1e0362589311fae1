// Package hca is what every emulated HCA shares, whatever its device model
// (PVRDMA, mlx5): the vocabulary the device models, the fault injector, the
// CLI's inspect, trace and metrics speak, typed by the core and not by a
// model's formats. Commands are named by the model (a number and the
// model's own name), async events and completion statuses by the verbs,
// counters, findings and trace events the same for every model; each model
// converts its own values with explicit mapping functions.
//
// The core's machinery:
//   - Core: the device lock, with the interrupts raised under it sent after;
//     the engine that runs a device's work off the vCPUs (doorbell kicks,
//     frames, batches from the other HCAs and the sending HCA's help with
//     them, timers); a device fatal on a panic. It drives its device model
//     through the Model interface.
//   - Wire: the device's port: packets built into frames or, between two
//     HCAs of the process with nothing watching, into batches and runs whose
//     payload is lent from guest memory (Lender, LentPayload); received
//     frames and batches demultiplexed to their QP (WireModel.QP) and handed
//     to its transport; port counters.
//   - QP: a queue pair as every model has it (handle, QPN, PD, its RC or UD
//     transport object, counters); QPNs numbers them.
//   - Table, MRKeys, PinBudget: handle tables, memory-region keys and
//     generations, and the bound on the page lists a guest makes the device
//     hold.
//
// What a model writes: its registers and command interface, its WQE, CQE
// and EQE formats and doorbells, its resource tables, and the transport.Env
// of its QPs (take and peek work requests, complete, publish ring indexes,
// raise events), with explicit mappings between its values and the core's.
package hca
