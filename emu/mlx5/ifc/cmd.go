package ifc

import "fmt"

// The command queue (include/linux/mlx5/device.h, core/cmd.c).
const (
	// CmdLayoutSize is the size of a command descriptor (mlx5_cmd_layout).
	CmdLayoutSize = 64
	// CmdInlineSize is how many bytes of a command's input and of its
	// output the descriptor carries itself (in[4], out[4]).
	CmdInlineSize = 16
	// PCICmdXport is the only descriptor type (MLX5_PCI_CMD_XPORT).
	PCICmdXport = 7
	// CmdOwnerHW is the ownership bit of status_own (CMD_OWNER_HW): set by
	// the driver before the doorbell, cleared by the device last.
	CmdOwnerHW = 0x1
	// CmdDataBlockSize is the data a mailbox block carries
	// (MLX5_CMD_DATA_BLOCK_SIZE).
	CmdDataBlockSize = 512
	// CmdProtBlockSize is the size of a mailbox block (mlx5_cmd_prot_block).
	CmdProtBlockSize = 576
	// CmdProtBlockAlign is the alignment of every mailbox block: the driver
	// takes them from a DMA pool aligned to roundup_pow_of_two(576)
	// (mlx5_cmd_enable).
	CmdProtBlockAlign = 1024
	// CmdIfRev is the command interface revision the driver requires in
	// cmdif_rev_fw_sub (CMD_IF_REV).
	CmdIfRev = 5
	// MaxCmdQueueLogSize bounds log_cmdq_size: at most 32 slots, one doorbell
	// bit each (mlx5_cmd_enable: 1 << log_sz > MLX5_MAX_COMMANDS fails).
	MaxCmdQueueLogSize = 5
	// MaxCmdMsgSize is the longest command message the driver builds
	// (core/cmd.c: LONG_LIST_SIZE with 4 KiB pages: a MANAGE_PAGES of 2 GiB,
	// 16 inline bytes and one more block), and MaxCmdBlocks its blocks.
	MaxCmdMsgSize = (2<<30)/4096*8 + CmdInlineSize + CmdDataBlockSize
	MaxCmdBlocks  = (MaxCmdMsgSize - CmdInlineSize + CmdDataBlockSize - 1) / CmdDataBlockSize
)

// Byte offsets in mlx5_cmd_layout.
const (
	CmdLayoutType      = 0x00
	CmdLayoutInLen     = 0x04
	CmdLayoutInPtr     = 0x08
	CmdLayoutIn        = 0x10
	CmdLayoutOut       = 0x20
	CmdLayoutOutPtr    = 0x30
	CmdLayoutOutLen    = 0x38
	CmdLayoutToken     = 0x3c
	CmdLayoutSig       = 0x3d
	CmdLayoutStatusOwn = 0x3f
)

// CmdLayout is a command descriptor, one slot of the command queue
// (struct mlx5_cmd_layout).
type CmdLayout struct {
	Type   uint8
	InLen  uint32
	InPtr  uint64 // first input mailbox block, 0 when InLen <= 16
	In     [CmdInlineSize]byte
	Out    [CmdInlineSize]byte
	OutPtr uint64 // first output mailbox block, 0 when OutLen <= 16
	OutLen uint32
	Token  uint8
	Sig    uint8
	// StatusOwn is the ownership bit (CmdOwnerHW) and, in bits 7:1, the
	// delivery status the device writes.
	StatusOwn uint8
}

// DecodeCmdLayout decodes a descriptor from its 64 bytes.
func DecodeCmdLayout(b []byte) (CmdLayout, error) {
	if err := need(b, CmdLayoutSize, "mlx5_cmd_layout"); err != nil {
		return CmdLayout{}, err
	}
	l := CmdLayout{
		Type:      b[CmdLayoutType],
		InLen:     be.Uint32(b[CmdLayoutInLen:]),
		InPtr:     be.Uint64(b[CmdLayoutInPtr:]),
		OutPtr:    be.Uint64(b[CmdLayoutOutPtr:]),
		OutLen:    be.Uint32(b[CmdLayoutOutLen:]),
		Token:     b[CmdLayoutToken],
		Sig:       b[CmdLayoutSig],
		StatusOwn: b[CmdLayoutStatusOwn],
	}
	copy(l.In[:], b[CmdLayoutIn:])
	copy(l.Out[:], b[CmdLayoutOut:])
	return l, nil
}

// need checks that b holds a structure of n bytes.
func need(b []byte, n int, what string) error {
	if len(b) < n {
		return fmt.Errorf("%s: %d bytes, want %d", what, len(b), n)
	}
	return nil
}

// Encode writes the descriptor into b[:64]; reserved bytes are zeroed.
func (l *CmdLayout) Encode(b []byte) {
	b = b[:CmdLayoutSize]
	clear(b)
	b[CmdLayoutType] = l.Type
	be.PutUint32(b[CmdLayoutInLen:], l.InLen)
	be.PutUint64(b[CmdLayoutInPtr:], l.InPtr)
	copy(b[CmdLayoutIn:], l.In[:])
	copy(b[CmdLayoutOut:], l.Out[:])
	be.PutUint64(b[CmdLayoutOutPtr:], l.OutPtr)
	be.PutUint32(b[CmdLayoutOutLen:], l.OutLen)
	b[CmdLayoutToken] = l.Token
	b[CmdLayoutSig] = l.Sig
	b[CmdLayoutStatusOwn] = l.StatusOwn
}

// DeliveryStatus is bits 7:1 of status_own.
func (l *CmdLayout) DeliveryStatus() DeliveryStatus { return DeliveryStatus(l.StatusOwn >> 1) }

// Byte offsets in mlx5_cmd_prot_block.
const (
	ProtBlockData     = 0x000
	ProtBlockNext     = 0x230
	ProtBlockBlockNum = 0x238
	ProtBlockToken    = 0x23d
	ProtBlockCtrlSig  = 0x23e
	ProtBlockSig      = 0x23f
	// ProtBlockTrailer is where the block's control fields start: what the
	// device reads of an output block before it writes the data.
	ProtBlockTrailer = ProtBlockNext
)

// CmdProtBlock is the control part of a mailbox block (struct
// mlx5_cmd_prot_block without its 512 data bytes, which the device copies
// on their own): the chain pointer, the block's number from the head of
// the chain, the command's token and the signatures.
type CmdProtBlock struct {
	Next     uint64
	BlockNum uint32
	Token    uint8
	CtrlSig  uint8
	Sig      uint8
}

// DecodeProtBlock decodes the control fields of a whole 576-byte block.
func DecodeProtBlock(b []byte) (CmdProtBlock, error) {
	if err := need(b, CmdProtBlockSize, "mlx5_cmd_prot_block"); err != nil {
		return CmdProtBlock{}, err
	}
	return DecodeProtTrailer(b[ProtBlockTrailer:CmdProtBlockSize]), nil
}

// DecodeProtTrailer decodes the control fields from the block's last 16
// bytes (offset ProtBlockTrailer on).
func DecodeProtTrailer(t []byte) CmdProtBlock {
	t = t[:CmdProtBlockSize-ProtBlockTrailer]
	return CmdProtBlock{
		Next:     be.Uint64(t[ProtBlockNext-ProtBlockTrailer:]),
		BlockNum: be.Uint32(t[ProtBlockBlockNum-ProtBlockTrailer:]),
		Token:    t[ProtBlockToken-ProtBlockTrailer],
		CtrlSig:  t[ProtBlockCtrlSig-ProtBlockTrailer],
		Sig:      t[ProtBlockSig-ProtBlockTrailer],
	}
}

// Encode writes the control fields into a 576-byte block b; its data and
// reserved bytes are left alone.
func (p *CmdProtBlock) Encode(b []byte) {
	b = b[:CmdProtBlockSize]
	be.PutUint64(b[ProtBlockNext:], p.Next)
	be.PutUint32(b[ProtBlockBlockNum:], p.BlockNum)
	b[ProtBlockBlockNum+4] = 0
	b[ProtBlockToken] = p.Token
	b[ProtBlockCtrlSig] = p.CtrlSig
	b[ProtBlockSig] = p.Sig
}

// MsgBlocks is how many mailbox blocks carry a message of n bytes
// (mlx5_calc_cmd_blocks): what does not fit in the 16 inline bytes, in
// 512-byte blocks.
func MsgBlocks(n uint32) uint32 {
	if n <= CmdInlineSize {
		return 0
	}
	return (n - CmdInlineSize + CmdDataBlockSize - 1) / CmdDataBlockSize
}

// The command headers every input and output starts with
// (core/cmd.c: mlx5_ifc_mbox_in_bits, mlx5_ifc_mbox_out_bits).
var (
	MboxInOpcode = F(0x00, 0x10)
	MboxInUID    = F(0x10, 0x10)
	MboxInOpMod  = F(0x30, 0x10)

	MboxOutStatus   = F(0x00, 0x08)
	MboxOutSyndrome = F(0x20, 0x20)
)

// MboxInSize and MboxOutSize are the sizes of the headers (0x80 bits).
const (
	MboxInSize  = 0x10
	MboxOutSize = 0x10
)

// DeliveryStatus says whether the device could take a command off the queue
// and hand its output back: bits 7:1 of status_own (core/cmd.c: enum
// MLX5_CMD_DELIVERY_STAT_*). The driver fails a command whose delivery
// status is not OK before it looks at the command's own status.
type DeliveryStatus uint8

// Delivery statuses.
const (
	DeliveryOK              DeliveryStatus = 0x0
	DeliverySignatErr       DeliveryStatus = 0x1
	DeliveryTokErr          DeliveryStatus = 0x2
	DeliveryBadBlkNumErr    DeliveryStatus = 0x3
	DeliveryOutPtrAlignErr  DeliveryStatus = 0x4
	DeliveryInPtrAlignErr   DeliveryStatus = 0x5
	DeliveryFWErr           DeliveryStatus = 0x6
	DeliveryInLengthErr     DeliveryStatus = 0x7
	DeliveryOutLengthErr    DeliveryStatus = 0x8
	DeliveryResFldNotClrErr DeliveryStatus = 0x9
	DeliveryCmdDescrErr     DeliveryStatus = 0x10
)

var deliveryNames = map[DeliveryStatus]string{
	DeliveryOK:              "no errors",
	DeliverySignatErr:       "signature error",
	DeliveryTokErr:          "token error",
	DeliveryBadBlkNumErr:    "bad block number",
	DeliveryOutPtrAlignErr:  "output pointer not aligned to block size",
	DeliveryInPtrAlignErr:   "input pointer not aligned to block size",
	DeliveryFWErr:           "firmware internal error",
	DeliveryInLengthErr:     "command input length error",
	DeliveryOutLengthErr:    "command output length error",
	DeliveryResFldNotClrErr: "reserved fields not cleared",
	DeliveryCmdDescrErr:     "bad command descriptor type",
}

// String is the driver's text for the status (deliv_status_to_str).
func (s DeliveryStatus) String() string { return named(deliveryNames, s, "unknown status code") }

// Status is a command's own status, the first byte of its output
// (include/linux/mlx5/device.h: MLX5_CMD_STAT_*).
type Status uint8

// Command statuses.
const (
	StatOK              Status = 0x0
	StatIntErr          Status = 0x1
	StatBadOpErr        Status = 0x2
	StatBadParamErr     Status = 0x3
	StatBadSysStateErr  Status = 0x4
	StatBadResErr       Status = 0x5
	StatResBusy         Status = 0x6
	StatNotReady        Status = 0x7
	StatLimErr          Status = 0x8
	StatBadResStateErr  Status = 0x9
	StatIxErr           Status = 0xa
	StatNoResErr        Status = 0xf
	StatBadQPStateErr   Status = 0x10
	StatBadPktErr       Status = 0x30
	StatBadSizeOutsCQEs Status = 0x40
	StatBadInpLenErr    Status = 0x50
	StatBadOutpLenErr   Status = 0x51
)

var statusNames = map[Status]string{
	StatOK:              "OK",
	StatIntErr:          "internal error",
	StatBadOpErr:        "bad operation",
	StatBadParamErr:     "bad parameter",
	StatBadSysStateErr:  "bad system state",
	StatBadResErr:       "bad resource",
	StatResBusy:         "resource busy",
	StatNotReady:        "FW not ready",
	StatLimErr:          "limits exceeded",
	StatBadResStateErr:  "bad resource state",
	StatIxErr:           "bad index",
	StatNoResErr:        "no resources",
	StatBadQPStateErr:   "bad QP state",
	StatBadPktErr:       "bad packet (discarded)",
	StatBadSizeOutsCQEs: "bad size too many outstanding CQEs",
	StatBadInpLenErr:    "bad input length",
	StatBadOutpLenErr:   "bad output length",
}

// String is the driver's text for the status (cmd_status_str).
func (s Status) String() string { return named(statusNames, s, "unknown status") }

// named is the driver's name of v, or unknown and v in hex.
func named[T ~uint8 | ~uint16](names map[T]string, v T, unknown string) string {
	if n, ok := names[v]; ok {
		return n
	}
	return fmt.Sprintf("%s %#x", unknown, uint16(v))
}
