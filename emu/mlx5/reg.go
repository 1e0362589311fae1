package mlx5

import (
	"github.com/hcaemu/hcaemu/emu/hca"
	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
)

// registerSpec is a register ACCESS_REG reaches (spec Appendix B): its
// size and how it is read and written.
type registerSpec struct {
	name  string
	size  int
	read  func(d *Device, data []byte)
	write func(d *Device, data []byte) result // nil: read-only
}

// registers are the ones the IB personality reaches with the §4 caps.
// Every other register (PTYS, PMTU, PVLC, PAOS, the *CAM registers, DTOR,
// MTUTC, ...) is reached only with caps the device keeps off or in the
// Ethernet personality: BAD_PARAM, which the optional paths tolerate.
var registers = map[uint32]registerSpec{
	ifc.RegHostEndianness: {
		// set_hca_ctrl at probe: the host's endianness, for firmware that
		// cares; the device answers in big-endian whatever it says.
		name: "HOST_ENDIANNESS", size: ifc.HostEndiannessRegSize,
		read:  func(*Device, []byte) {},
		write: func(*Device, []byte) result { return ok },
	},
	ifc.RegPCAP: {
		// mlx5_set_port_caps: the port's capability mask (PortInfo
		// CapabilityMask, §5.4); ib_cm sets IsCommunicationManagementSupported.
		name: "PCAP", size: ifc.PCAPRegSize,
		read: func(d *Device, b []byte) {
			ifc.PCAPRegLocalPort.Set(b, 1)
			ifc.PCAPRegPortCapabilityMask.Set(b, d.fn.pcap)
		},
		write: func(d *Device, b []byte) result {
			if p := ifc.PCAPRegLocalPort.Get(b); p != 1 {
				return d.refuse(ifc.StatBadParamErr, SyndRegField, hca.FindingRegister, ifc.OpAccessReg, "access_register_in.register_data.pcap_reg.local_port=%d: one port (1)", p)
			}
			d.fn.pcap = ifc.PCAPRegPortCapabilityMask.Get(b)
			return ok
		},
	},
	ifc.RegNodeDesc: {
		// mlx5_ib_modify_device: the node description (NodeDescription).
		name: "NODE_DESC", size: ifc.NodeDescRegSize,
		read: func(d *Device, b []byte) { copy(b, d.fn.nodeDesc[:]) },
		write: func(d *Device, b []byte) result {
			copy(d.fn.nodeDesc[:], b)
			return ok
		},
	},
}

// accessReg: ACCESS_REG (0x805): op_mod 0 writes, 1 reads
// (mlx5_core_access_reg); the register data follows the header in both
// the input and the output, and a write's output echoes what was
// written.
func (d *Device) accessReg(in, out []byte) result {
	const op = ifc.OpAccessReg
	id := ifc.AccessRegisterInRegisterID.Get(in)
	opMod := ifc.MboxInOpMod.Get(in)
	reg, known := registers[id]
	switch {
	case !known:
		return d.refuse(ifc.StatBadParamErr, SyndRegister, hca.FindingRegister, op, "access_register_in.register_id=%#x: not implemented (IB personality: HOST_ENDIANNESS, PCAP, NODE_DESC)", id)
	case opMod != ifc.RegWrite && opMod != ifc.RegRead:
		return d.refuse(ifc.StatBadParamErr, SyndRegOpMod, hca.FindingRegister, op, "access_register_in.op_mod=%d: write (0) or read (1)", opMod)
	}
	data := in[ifc.AccessRegisterData:]
	outData := out[ifc.AccessRegisterData:]
	if opMod == ifc.RegRead {
		if len(outData) < reg.size {
			return d.refuse(ifc.StatBadOutpLenErr, SyndRegLen, hca.FindingRegister, op, "%s read: access_register_out.register_data %d bytes < %d", reg.name, len(outData), reg.size)
		}
		reg.read(d, outData[:reg.size])
		return ok
	}
	switch {
	case reg.write == nil:
		return d.refuse(ifc.StatBadParamErr, SyndRegReadOnly, hca.FindingRegister, op, "%s is read-only", reg.name)
	case len(data) < reg.size:
		return d.refuse(ifc.StatBadInpLenErr, SyndRegLen, hca.FindingRegister, op, "%s write: access_register_in.register_data %d bytes < %d", reg.name, len(data), reg.size)
	}
	if r := reg.write(d, data[:reg.size]); r != ok {
		return r
	}
	copy(outData, data)
	return ok
}
