package dma

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxWindows bounds the number of DMA windows one Map holds (the vfio-user
// max_dma_maps capability).
const MaxWindows = 65535

// MaxFiles bounds the backing files (one descriptor and one mapping each) one
// Map holds, so that one client cannot take the process's descriptors from
// the others. QEMU backs guest RAM with one memfd per memory backend.
const MaxFiles = 64

// Map is guest memory as the DMA windows of one vfio-user client describe it:
// the device-side half of an IOMMU whose mappings the client installs with
// DMA_MAP and removes with DMA_UNMAP.
//
// A window backed by a file (the memfd behind QEMU's guest RAM) is served from
// a shared mmap of that file. Windows of the same file share one mmap and one
// descriptor: files are recognised by (st_dev, st_ino), mapped whole once and
// reference counted by their windows. A window without a file (ROMs, RAM that
// is not shared) is recorded so that the address space stays accurate, but
// every access to it faults.
//
// Reads and writes translate without locks: the window table is an immutable
// sorted slice published atomically, and an access pins its window for its
// duration. Unmap publishes the table without the window, then waits for the
// pinned accesses to finish before it unmaps the memory and returns, so that
// the client may reuse the memory as soon as it has the reply. An access that
// races with an unmap fails with ErrFault; it never blocks and never touches
// unmapped memory.
//
// Map, Unmap, UnmapAll and Close are serialised against each other; ReadAt,
// WriteAt and Access may run concurrently with everything. The zero Map is
// empty and ready to use.
//
// Errors from Map and Unmap wrap a unix.Errno (EINVAL, EEXIST, ENOENT, ENOSPC,
// ENODEV or the errno of a failed fstat/mmap) so a protocol server can reply
// with errors.As.
type Map struct {
	mu     sync.Mutex // serialises changes to the table and files
	table  atomic.Pointer[[]*window]
	files  map[fileKey]*backing
	nfiles int // backings alive (a replaced one lives on for its windows)
	closed bool
}

var _ Memory = (*Map)(nil)

type fileKey struct{ dev, ino uint64 }

// backing is one shared mmap of a whole backing file.
type backing struct {
	key      fileKey
	fd       int
	mem      []byte
	writable bool // mapped with PROT_WRITE
	refs     int  // windows using it; guarded by Map.mu
}

// window is one DMA window [iova, end). Its fields are immutable once it is
// published, except for the pin count and the dead flag.
type window struct {
	iova, end uint64
	off       uint64   // offset of iova in file
	file      *backing // nil: no backing file, accesses fault
	writable  bool

	pins    atomic.Int64 // accesses in flight
	dead    atomic.Bool  // removed from the table; no new pins
	once    sync.Once
	drained chan struct{} // closed when dead and pins reaches 0
}

func errnof(e unix.Errno, format string, args ...any) error {
	return fmt.Errorf("dma window: %s: %w", fmt.Sprintf(format, args...), e)
}

// Map adds the window [iova, iova+size). With fd >= 0 the window is backed by
// the file fd at fileOffset; with fd < 0 it has no backing and every access
// to it faults. writable permits device writes; a file that can only be
// mapped read-only yields a read-only window.
//
// Map takes ownership of fd in every case: it keeps it, or closes it when the
// file is already mapped or when Map fails.
func (m *Map) Map(iova, size, fileOffset uint64, fd int, writable bool) (err error) {
	if fd >= 0 {
		defer func() {
			if err != nil {
				unix.Close(fd)
			}
		}()
	}
	end, ok := End(iova, size)
	if size == 0 {
		return errnof(unix.EINVAL, "[%#x, +0): empty window", iova)
	}
	if !ok {
		return errnof(unix.EINVAL, "[%#x, +%#x): address overflows", iova, size)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errnof(unix.ENODEV, "[%#x, +%#x): memory closed", iova, size)
	}
	old := m.windows()
	if len(old) >= MaxWindows {
		return errnof(unix.ENOSPC, "[%#x, +%#x): more than %d windows", iova, size, MaxWindows)
	}
	i := sort.Search(len(old), func(i int) bool { return old[i].end > iova })
	if i < len(old) && old[i].iova < end {
		return errnof(unix.EEXIST, "[%#x, +%#x) overlaps [%#x, %#x)", iova, size, old[i].iova, old[i].end)
	}

	w := &window{iova: iova, end: end, off: fileOffset, writable: writable, drained: make(chan struct{})}
	if fd >= 0 {
		b, err := m.attach(fd, fileOffset, size, writable)
		if err != nil {
			return errnof(errnoOf(err), "[%#x, +%#x) at file offset %#x: %v", iova, size, fileOffset, err)
		}
		w.file = b
		w.writable = writable && b.writable
	} else {
		w.off = 0
	}

	t := make([]*window, 0, len(old)+1)
	t = append(t, old[:i]...)
	t = append(t, w)
	t = append(t, old[i:]...)
	m.table.Store(&t)
	return nil
}

// checkFileSystem refuses backing files whose page faults can block on
// something the client controls or that can stall indefinitely (FUSE, NFS,
// disk file systems): a device access that faults on such a page would hang
// the goroutine doing it, under the device's locks. Guest RAM is a memfd
// (tmpfs, or hugetlbfs with MFD_HUGETLB), a file on tmpfs (/dev/shm) or on
// hugetlbfs (/dev/hugepages).
func checkFileSystem(fd int) error {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("fstatfs: %w", err)
	}
	switch uint32(fs.Type) {
	case unix.TMPFS_MAGIC, unix.HUGETLBFS_MAGIC:
		return nil
	}
	return fmt.Errorf("backing file is on a file system of type %#x whose page faults can block; only memfd, tmpfs and hugetlbfs are accepted: %w", uint32(fs.Type), unix.EINVAL)
}

// attach finds or makes the shared mapping of fd's file covering
// [off, off+size). On success fd is owned by the mapping or closed.
func (m *Map) attach(fd int, off, size uint64, writable bool) (*backing, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("backing fd is not a regular file (mode %#o): %w", st.Mode, unix.EINVAL)
	}
	if err := checkFileSystem(fd); err != nil {
		return nil, err
	}
	fileEnd, ok := End(off, size)
	if !ok || st.Size < 0 || fileEnd > uint64(st.Size) {
		return nil, fmt.Errorf("window ends beyond the file size %#x: %w", st.Size, unix.EINVAL)
	}
	if uint64(st.Size) > math.MaxInt {
		return nil, fmt.Errorf("file size %#x too large: %w", st.Size, unix.EINVAL)
	}
	key := fileKey{dev: uint64(st.Dev), ino: st.Ino}
	if b := m.files[key]; b != nil && uint64(len(b.mem)) >= fileEnd && (b.writable || !writable) {
		b.refs++
		unix.Close(fd)
		return b, nil
	}
	if m.nfiles >= MaxFiles {
		return nil, fmt.Errorf("more than %d backing files: %w", MaxFiles, unix.ENOSPC)
	}
	wr := true
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		wr = false
		mem, err = unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	}
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	// Guest RAM has no business in a core dump of the emulator.
	_ = unix.Madvise(mem, unix.MADV_DONTDUMP)
	b := &backing{key: key, fd: fd, mem: mem, writable: wr, refs: 1}
	m.nfiles++
	if m.files == nil {
		m.files = make(map[fileKey]*backing)
	}
	// A mapping that is too short or read-only stays alive for its own
	// windows; later windows of the file use the new one.
	m.files[key] = b
	return b, nil
}

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EINVAL
}

func (m *Map) windows() []*window {
	if t := m.table.Load(); t != nil {
		return *t
	}
	return nil
}

// Unmap removes the window [iova, iova+size), which must match a window
// exactly. It returns after every access to the window has finished and its
// memory is unmapped.
func (m *Map) Unmap(iova, size uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.windows()
	i := sort.Search(len(old), func(i int) bool { return old[i].iova >= iova })
	if i == len(old) || old[i].iova != iova || old[i].end-old[i].iova != size {
		return errnof(unix.ENOENT, "[%#x, +%#x): no such window", iova, size)
	}
	w := old[i]
	t := make([]*window, 0, len(old)-1)
	t = append(t, old[:i]...)
	t = append(t, old[i+1:]...)
	m.table.Store(&t)
	m.retire(w)
	return nil
}

// UnmapAll removes every window, waiting for accesses in flight.
func (m *Map) UnmapAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unmapAll()
}

func (m *Map) unmapAll() {
	old := m.windows()
	empty := []*window{}
	m.table.Store(&empty)
	for _, w := range old {
		m.retire(w)
	}
}

// Close removes every window and makes later Map calls fail.
func (m *Map) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unmapAll()
	m.closed = true
	return nil
}

// retire waits until no access pins w (which is no longer in the table) and
// drops its reference on the backing file.
func (m *Map) retire(w *window) {
	w.dead.Store(true)
	if w.pins.Load() != 0 {
		<-w.drained
	}
	b := w.file
	if b == nil {
		return
	}
	b.refs--
	if b.refs > 0 {
		return
	}
	if m.files[b.key] == b {
		delete(m.files, b.key)
	}
	m.nfiles--
	_ = unix.Munmap(b.mem)
	_ = unix.Close(b.fd)
}

// pin finds the window holding [gpa, gpa+n) and pins it. The caller must
// unpin the window when done with the returned memory.
func (m *Map) pin(gpa, n uint64, write bool) (*window, []byte, error) {
	end, ok := End(gpa, n)
	if !ok {
		return nil, nil, Fault(gpa, n, "address overflows")
	}
	ws := m.windows()
	i := sort.Search(len(ws), func(i int) bool { return ws[i].end > gpa })
	if i == len(ws) || ws[i].iova > gpa || end > ws[i].end {
		return nil, nil, Fault(gpa, n, "not inside one DMA window")
	}
	w := ws[i]
	if w.file == nil {
		return nil, nil, Fault(gpa, n, "DMA window has no backing file")
	}
	if write && !w.writable {
		return nil, nil, Fault(gpa, n, "DMA window is read-only")
	}
	w.pins.Add(1)
	if w.dead.Load() {
		w.unpin()
		return nil, nil, Fault(gpa, n, "DMA window is being unmapped")
	}
	o := w.off + (gpa - w.iova)
	return w, w.file.mem[o : o+n : o+n], nil
}

func (w *window) unpin() {
	if w.pins.Add(-1) == 0 && w.dead.Load() {
		w.once.Do(func() { close(w.drained) })
	}
}

// ReadAt implements Memory.
func (m *Map) ReadAt(p []byte, gpa uint64) error {
	return m.Access(gpa, uint64(len(p)), false, func(b []byte) { copy(p, b) })
}

// WriteAt implements Memory.
func (m *Map) WriteAt(p []byte, gpa uint64) error {
	return m.Access(gpa, uint64(len(p)), true, func(b []byte) { copy(b, p) })
}

// Access implements Memory. A memory fault inside fn (SIGBUS from a backing
// file truncated under the mapping) ends fn and is returned as ErrFault; fn
// must therefore leave its own state consistent at any point. Unmap of the
// window waits for fn, so fn must be short and must not wait for anything
// the vfio-user message loop does.
func (m *Map) Access(gpa, n uint64, write bool, fn func(b []byte)) error {
	w, b, err := m.pin(gpa, n, write)
	if err != nil {
		return err
	}
	defer w.unpin()
	return guard(gpa, n, func() { fn(b) })
}

// Load32 implements WordAccess.
func (m *Map) Load32(gpa uint64) (v uint32, err error) {
	if gpa&3 != 0 {
		return 0, Fault(gpa, 4, "unaligned 32-bit load")
	}
	w, b, err := m.pin(gpa, 4, false)
	if err != nil {
		return 0, err
	}
	defer w.unpin()
	err = guard(gpa, 4, func() { v = atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[0]))) })
	return v, err
}

// Store32 implements WordAccess.
func (m *Map) Store32(gpa uint64, v uint32) error {
	if gpa&3 != 0 {
		return Fault(gpa, 4, "unaligned 32-bit store")
	}
	w, b, err := m.pin(gpa, 4, true)
	if err != nil {
		return err
	}
	defer w.unpin()
	return guard(gpa, 4, func() { atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[0])), v) })
}

// guard runs f, turning a memory fault into ErrFault.
func guard(gpa, n uint64, f func()) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			re, ok := r.(runtime.Error)
			_, fault := r.(interface{ Addr() uintptr })
			if !ok || !fault {
				panic(r)
			}
			err = Fault(gpa, n, "memory fault: "+re.Error())
		}
	}()
	f()
	return nil
}
