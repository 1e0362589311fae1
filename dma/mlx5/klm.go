package mlx5

import "github.com/hcaemu/hcaemu/dma"

// KLM is one entry of an indirect translation (struct mlx5_klm, the UMR
// WQE's struct mlx5_wqe_umr_klm_seg): ByteCount bytes at Address of the
// memory key MKey.
type KLM struct {
	ByteCount uint32
	MKey      uint32
	Address   uint64
}

// KLMs is a validated KLM list: the concatenation of its entries is the
// indirect key's (or memory window's) address space, from 0.
type KLMs []KLM

// DecodeKLMs reads n entries from b (at least n*KLMSize bytes; n at most
// limit, the device's bound). Every byte_count is at most MaxKLMByteCount
// and no entry runs past 2^64; a zero byte_count is an entry of no bytes
// (the provider pads a UMR's inline KLM area with zero entries).
func DecodeKLMs(b []byte, n, limit int) (KLMs, error) {
	if n < 0 || n > limit {
		return nil, errf("%d KLM entries, at most %d", n, limit)
	}
	if n > len(b)/KLMSize {
		return nil, errf("%d KLM entries, %d bytes given", n, len(b))
	}
	k := make(KLMs, n)
	for i := range k {
		e := b[i*KLMSize:]
		k[i] = KLM{ByteCount: be.Uint32(e), MKey: be.Uint32(e[4:]), Address: be.Uint64(e[8:])}
		if k[i].ByteCount > MaxKLMByteCount {
			return nil, errf("KLM %d: byte_count %#x above 2 GiB", i, k[i].ByteCount)
		}
		if _, ok := dma.End(k[i].Address, uint64(k[i].ByteCount)); !ok {
			return nil, errf("KLM %d: %#x + %#x runs past 2^64", i, k[i].Address, k[i].ByteCount)
		}
	}
	return k, nil
}

// Encode writes the entries into b (len(k)*KLMSize bytes).
func (k KLMs) Encode(b []byte) {
	for i, e := range k {
		s := b[i*KLMSize : (i+1)*KLMSize]
		be.PutUint32(s, e.ByteCount)
		be.PutUint32(s[4:], e.MKey)
		be.PutUint64(s[8:], e.Address)
	}
}

// Length is the number of bytes the list translates (at most 2^31 per
// entry: no overflow for any list a slice can hold).
func (k KLMs) Length() uint64 {
	var n uint64
	for _, e := range k {
		n += uint64(e.ByteCount)
	}
	return n
}

// Range calls fn for each piece of [off, off+n) of the list's address
// space, split at entry boundaries, with the memory key and address the
// piece translates to, its length and its offset from off. A range past
// Length faults before fn is called.
func (k KLMs) Range(off, n uint64, fn func(mkey uint32, addr, n, done uint64) error) error {
	end, ok := dma.End(off, n)
	if !ok || end > k.Length() {
		return dma.Fault(off, n, "outside the KLM list")
	}
	var base, done uint64 // base: the list offset where entry e starts
	for _, e := range k {
		if done == n {
			break
		}
		size := uint64(e.ByteCount)
		if o := off + done; o < base+size {
			in := o - base
			chunk := min(n-done, size-in)
			if err := fn(e.MKey, e.Address+in, chunk, done); err != nil {
				return err
			}
			done += chunk
		}
		base += size
	}
	return nil
}
