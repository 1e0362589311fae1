package mad

import (
	"bytes"
	"testing"
)

// codec is one decoder/encoder pair under its reserved-bit masks: encoding
// what it decoded gives back the input with the reserved bits cleared.
type codec struct {
	name     string
	size     int
	reserved map[int]byte // offset → reserved bits
	// roundTrip decodes b, encodes the value into out (nil: only decode)
	// and decodes out again, failing when the two values differ.
	roundTrip func(b, out []byte) error
}

// rt makes a codec's roundTrip from its decoder and encoder.
func rt[T comparable](dec func([]byte) (T, error), enc func(*T, []byte) error) func(b, out []byte) error {
	return func(b, out []byte) error {
		v, err := dec(b)
		if err != nil || out == nil {
			return err
		}
		if err := enc(&v, out); err != nil {
			return err
		}
		w, err := dec(out)
		if err != nil {
			return err
		}
		if w != v {
			return errMismatch
		}
		return nil
	}
}

type mismatch struct{}

func (mismatch) Error() string { return "decoded values differ" }

var errMismatch error = mismatch{}

var codecs = []codec{
	{"Header", HeaderSize, nil, rt(DecodeHeader, (*Header).Encode)},
	{"SMP", Size, nil, rt(DecodeSMP, (*SMP).Encode)},
	{"SAMAD", Size, nil, rt(DecodeSA, (*SAMAD).Encode)},
	{"NodeInfo", NodeInfoSize, nil, rt(DecodeNodeInfo, (*NodeInfo).Encode)},
	{"NodeDescription", NodeDescriptionSize, nil, rt(DecodeNodeDescription, (*NodeDescription).Encode)},
	{"PortInfo", PortInfoSize, map[int]byte{34: 0x38, 52: 0xE0, 56: 0xFF, 63: 0xE0}, rt(DecodePortInfo, (*PortInfo).Encode)},
	{"GUIDInfo", GUIDInfoSize, nil, rt(DecodeGUIDInfo, (*GUIDInfo).Encode)},
	{"PKeyTable", PKeyTableSize, nil, rt(DecodePKeyTable, (*PKeyTable).Encode)},
	{"ClassPortInfo", ClassPortInfoSize, map[int]byte{32: 0xFF}, rt(DecodeClassPortInfo, (*ClassPortInfo).Encode)},
	{"PathRecord", PathRecordSize, map[int]byte{44: 0x70, 58: 0xFF, 59: 0xFF, 60: 0xFF, 61: 0xFF, 62: 0xFF, 63: 0xFF},
		rt(DecodePathRecord, (*PathRecord).Encode)},
	{"MCMemberRecord", MCMemberRecordSize, map[int]byte{49: 0x7F, 50: 0xFF, 51: 0xFF}, rt(DecodeMCMemberRecord, (*MCMemberRecord).Encode)},
}

// checkCodecs runs every codec on b (each on its own length, the MADs on
// exactly 256 bytes) and checks the canonical round trip.
func checkCodecs(t *testing.T, b []byte) {
	for _, c := range codecs {
		in := b
		if len(in) < c.size {
			in = append(bytes.Clone(in), make([]byte, c.size-len(in))...)
		}
		in = in[:c.size]
		if c.size == Size {
			// The MAD decoders take any class of their own; give them theirs.
			in = bytes.Clone(in)
			switch c.name {
			case "SMP":
				in[1] = ClassSubnLID | in[1]&0x80
			case "SAMAD":
				in[1] = ClassSubnAdm
			}
		}
		out := make([]byte, c.size)
		if err := c.roundTrip(in, out); err != nil {
			t.Fatalf("%s: %v on %x", c.name, err, in)
		}
		want := bytes.Clone(in)
		for off, m := range c.reserved {
			want[off] &^= m
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("%s: encode(decode(b)) =\n%x, want\n%x", c.name, out, want)
		}
	}
}

func TestCodecsRoundTrip(t *testing.T) {
	checkCodecs(t, bytes.Repeat([]byte{0xFF}, Size))
	checkCodecs(t, make([]byte, Size))
	b := make([]byte, Size)
	for i := range b {
		b[i] = byte(i*37 + 11)
	}
	checkCodecs(t, b)
}

// FuzzDecode runs every MAD and attribute codec on arbitrary bytes: none
// panics, and encoding a decoded value gives exactly the input with its
// reserved bits cleared (and decodes to the same value).
func FuzzDecode(f *testing.F) {
	f.Add(bytes.Repeat([]byte{0xFF}, Size))
	f.Add(make([]byte, 8))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range codecs {
			_ = c.roundTrip(b, nil) // any length: an error, never a panic
		}
		checkCodecs(t, b)
	})
}
