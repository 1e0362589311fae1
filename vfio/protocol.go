package vfio

import (
	"encoding/binary"
	"fmt"
)

// Command numbers of the vfio-user protocol.
const (
	CmdVersion          = 1
	CmdDMAMap           = 2
	CmdDMAUnmap         = 3
	CmdGetInfo          = 4
	CmdGetRegionInfo    = 5
	CmdGetRegionIOFDs   = 6
	CmdGetIRQInfo       = 7
	CmdSetIRQs          = 8
	CmdRegionRead       = 9
	CmdRegionWrite      = 10
	CmdDMARead          = 11
	CmdDMAWrite         = 12
	CmdDeviceReset      = 13
	CmdDirtyPages       = 14
	CmdRegionWriteMulti = 15
	CmdDeviceFeature    = 16
)

var cmdNames = map[uint16]string{
	CmdVersion:          "VERSION",
	CmdDMAMap:           "DMA_MAP",
	CmdDMAUnmap:         "DMA_UNMAP",
	CmdGetInfo:          "DEVICE_GET_INFO",
	CmdGetRegionInfo:    "DEVICE_GET_REGION_INFO",
	CmdGetRegionIOFDs:   "DEVICE_GET_REGION_IO_FDS",
	CmdGetIRQInfo:       "DEVICE_GET_IRQ_INFO",
	CmdSetIRQs:          "DEVICE_SET_IRQS",
	CmdRegionRead:       "REGION_READ",
	CmdRegionWrite:      "REGION_WRITE",
	CmdDMARead:          "DMA_READ",
	CmdDMAWrite:         "DMA_WRITE",
	CmdDeviceReset:      "DEVICE_RESET",
	CmdDirtyPages:       "DIRTY_PAGES",
	CmdRegionWriteMulti: "REGION_WRITE_MULTI",
	CmdDeviceFeature:    "DEVICE_FEATURE",
}

// CmdName names a command number for logs.
func CmdName(cmd uint16) string {
	if n, ok := cmdNames[cmd]; ok {
		return n
	}
	return fmt.Sprintf("command %d", cmd)
}

// Header flags.
const (
	FlagTypeMask = 0x0f
	FlagRequest  = 0x0
	FlagReply    = 0x1
	FlagNoReply  = 0x10
	FlagError    = 0x20
)

// HeaderSize is the size of the message header.
const HeaderSize = 16

// Limits the server advertises in its VERSION reply.
const (
	MaxMsgFDs       = 16
	MaxDataXferSize = 1 << 20
	// MaxMsgSize is the largest message the server accepts: a REGION_WRITE
	// of MaxDataXferSize bytes.
	MaxMsgSize = HeaderSize + 16 + MaxDataXferSize
)

// Device info and region info flags (Linux vfio uapi).
const (
	DeviceFlagReset = 1 << 0
	DeviceFlagPCI   = 1 << 1

	RegionFlagRead  = 1 << 0
	RegionFlagWrite = 1 << 1
	RegionFlagMmap  = 1 << 2
	RegionFlagCaps  = 1 << 3
)

// IRQ info flags and SET_IRQS flags (Linux vfio uapi).
const (
	IRQInfoEventfd    = 1 << 0
	IRQInfoMaskable   = 1 << 1
	IRQInfoAutomasked = 1 << 2
	IRQInfoNoResize   = 1 << 3

	IRQDataNone      = 1 << 0
	IRQDataBool      = 1 << 1
	IRQDataEventfd   = 1 << 2
	IRQActionMask    = 1 << 3
	IRQActionUnmask  = 1 << 4
	IRQActionTrigger = 1 << 5

	irqDataMask   = IRQDataNone | IRQDataBool | IRQDataEventfd
	irqActionMask = IRQActionMask | IRQActionUnmask | IRQActionTrigger
)

// DMA_MAP and DMA_UNMAP flags.
const (
	DMAFlagRead  = 1 << 0
	DMAFlagWrite = 1 << 1

	DMAUnmapGetDirtyBitmap = 1 << 0
	DMAUnmapAll            = 1 << 1
)

// Fixed payload sizes of the requests.
const (
	dmaMapSize      = 32
	dmaUnmapSize    = 24
	deviceInfoSize  = 16
	regionInfoSize  = 32
	irqInfoSize     = 16
	setIRQsSize     = 20
	regionAccessLen = 16
	versionMinSize  = 4
)

var le = binary.LittleEndian

// Header is the 16-byte vfio-user message header.
type Header struct {
	ID      uint16
	Command uint16
	Size    uint32 // whole message, header included
	Flags   uint32
	Errno   uint32
}

// ParseHeader decodes the first HeaderSize bytes of b.
func ParseHeader(b []byte) Header {
	_ = b[HeaderSize-1]
	return Header{
		ID:      le.Uint16(b[0:]),
		Command: le.Uint16(b[2:]),
		Size:    le.Uint32(b[4:]),
		Flags:   le.Uint32(b[8:]),
		Errno:   le.Uint32(b[12:]),
	}
}

// Put encodes h into the first HeaderSize bytes of b.
func (h Header) Put(b []byte) {
	_ = b[HeaderSize-1]
	le.PutUint16(b[0:], h.ID)
	le.PutUint16(b[2:], h.Command)
	le.PutUint32(b[4:], h.Size)
	le.PutUint32(b[8:], h.Flags)
	le.PutUint32(b[12:], h.Errno)
}
