package ifc

import (
	"encoding/binary"
	"fmt"
)

var be = binary.BigEndian

// Field is a field of a PRM structure as mlx5_ifc.h declares it: Off is the
// bit offset from the start of the structure, counting from the most
// significant bit of byte 0 (the reserved_at_<off> names of mlx5_ifc.h),
// Width its size in bits (u8 name[Width]).
//
// A Field of 1 to 32 bits lies inside one big-endian 32-bit word
// (MLX5_GET/MLX5_SET); a 64-bit one starts on a 64-bit boundary
// (MLX5_GET64/MLX5_SET64); a byte array (MLX5_ADDR_OF) starts and ends on
// byte boundaries. F builds a Field and panics on anything else: fields are
// written from the header, never from guest data.
type Field struct {
	Off, Width uint32
}

// F returns the field at bit offset off, width bits wide.
func F(off, width uint32) Field {
	f := Field{off, width}
	if !f.Valid() {
		panic(fmt.Sprintf("ifc: field at bit %#x, %d bits wide, is neither inside one 32-bit word, a 64-bit word nor a byte array", off, width))
	}
	return f
}

// Valid reports whether f is a field MLX5_GET, MLX5_GET64 or MLX5_ADDR_OF
// can address.
func (f Field) Valid() bool {
	switch {
	case f.Width == 0:
		return false
	case f.Width <= 32:
		return f.Off%32+f.Width <= 32
	case f.Width == 64 && f.Off%64 == 0:
		return true
	}
	return f.Off%8 == 0 && f.Width%8 == 0
}

// ByteOff is the offset of the byte that holds the field's first bit.
func (f Field) ByteOff() uint32 { return f.Off / 8 }

// End is the size in bytes of the smallest buffer that holds the field.
func (f Field) End() uint32 { return (f.Off + f.Width + 7) / 8 }

// mask is __mlx5_mask: the field's value bits, in the low bits.
func (f Field) mask() uint32 {
	if f.Width >= 32 {
		return ^uint32(0)
	}
	return 1<<f.Width - 1
}

// shift is __mlx5_dw_bit_off: where the field's least significant bit sits
// in its 32-bit word.
func (f Field) shift() uint32 { return 32 - f.Width - f.Off%32 }

// word is the byte offset of the field's 32-bit word (__mlx5_dw_off * 4).
func (f Field) word() uint32 { return f.Off / 32 * 4 }

// Get reads a field of at most 32 bits from b, as MLX5_GET.
func (f Field) Get(b []byte) uint32 {
	f.check(32)
	return be.Uint32(b[f.word():]) >> f.shift() & f.mask()
}

// Set writes v to a field of at most 32 bits of b, as MLX5_SET: the bits of
// v beyond the field's width are dropped, the word's other bits are kept.
func (f Field) Set(b []byte, v uint32) {
	f.check(32)
	w := be.Uint32(b[f.word():])
	m := f.mask() << f.shift()
	be.PutUint32(b[f.word():], w&^m|v<<f.shift()&m)
}

// Get64 reads a 64-bit field, as MLX5_GET64.
func (f Field) Get64(b []byte) uint64 {
	f.check(64)
	return be.Uint64(b[f.Off/8:])
}

// Set64 writes a 64-bit field, as MLX5_SET64.
func (f Field) Set64(b []byte, v uint64) {
	f.check(64)
	be.PutUint64(b[f.Off/8:], v)
}

// Bytes is the field's bytes in b (MLX5_ADDR_OF), for byte arrays and
// embedded structures.
func (f Field) Bytes(b []byte) []byte {
	if f.Off%8 != 0 || f.Width%8 != 0 {
		panic(fmt.Sprintf("ifc: field at bit %#x, %d bits wide, is not a byte array", f.Off, f.Width))
	}
	return b[f.Off/8 : f.End() : f.End()]
}

func (f Field) check(width uint32) {
	if width == 32 && f.Width <= 32 && f.Valid() || width == 64 && f.Width == 64 && f.Valid() {
		return
	}
	panic(fmt.Sprintf("ifc: field at bit %#x, %d bits wide, read or written as %d bits", f.Off, f.Width, width))
}
