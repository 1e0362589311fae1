package dma

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// checkFDs fails the test if it ends with more open descriptors than it began.
func checkFDs(t *testing.T) {
	before := countFDs(t)
	t.Cleanup(func() {
		if after := countFDs(t); after != before {
			t.Errorf("fd leak: %d open before, %d after", before, after)
		}
	})
}

func memfd(t *testing.T, size int64) int {
	t.Helper()
	fd, err := unix.MemfdCreate("dma-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func dup(t *testing.T, fd int) int {
	t.Helper()
	d, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func isClosed(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return errors.Is(err, unix.EBADF)
}

func TestMapReadWriteThroughFile(t *testing.T) {
	checkFDs(t)
	fd := memfd(t, 0x10000)
	var m Map
	defer m.Close()
	if err := m.Map(0x100000, 0x4000, 0x2000, dup(t, fd), true); err != nil {
		t.Fatal(err)
	}
	// Written through the fd, seen through the window.
	if _, err := unix.Pwrite(fd, []byte("hello"), 0x2010); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if err := m.ReadAt(got, 0x100010); err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello" {
		t.Fatalf("ReadAt = %q, want hello", got)
	}
	// Written through the window, seen through the fd.
	if err := m.WriteAt([]byte("world"), 0x103ffb); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := unix.Pread(fd, buf, 0x5ffb); err != nil {
		t.Fatal(err)
	}
	if string(buf) != "world" {
		t.Fatalf("file has %q, want world", buf)
	}
	// Atomics through Access.
	if err := StoreUint32(&m, 0x100100, 0xdeadbeef); err != nil {
		t.Fatal(err)
	}
	if v, err := LoadUint32(&m, 0x100100); err != nil || v != 0xdeadbeef {
		t.Fatalf("LoadUint32 = %#x, %v", v, err)
	}
	if err := m.Unmap(0x100000, 0x4000); err != nil {
		t.Fatal(err)
	}
	if err := m.ReadAt(got, 0x100010); !errors.Is(err, ErrFault) {
		t.Fatalf("read after unmap: %v, want ErrFault", err)
	}
}

func TestMapDedupesBackingFile(t *testing.T) {
	checkFDs(t)
	fd := memfd(t, 0x20000)
	var m Map
	defer m.Close()
	a, b := dup(t, fd), dup(t, fd)
	if err := m.Map(0, 0x10000, 0, a, true); err != nil {
		t.Fatal(err)
	}
	if err := m.Map(0x100000, 0x10000, 0x10000, b, true); err != nil {
		t.Fatal(err)
	}
	if len(m.files) != 1 {
		t.Fatalf("%d mappings for one file, want 1", len(m.files))
	}
	for _, bk := range m.files {
		if bk.refs != 2 {
			t.Fatalf("refs = %d, want 2", bk.refs)
		}
	}
	if isClosed(a) {
		t.Fatal("first fd closed; it should back the mapping")
	}
	if !isClosed(b) {
		t.Fatal("duplicate fd not closed")
	}
	// Both windows see the same file.
	if err := m.WriteAt([]byte{1, 2, 3}, 0x100000); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	if _, err := unix.Pread(fd, got, 0x10000); err != nil || !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Fatalf("file at 0x10000 = %v, %v", got, err)
	}
	// The mapping lives until its last window goes.
	if err := m.Unmap(0, 0x10000); err != nil {
		t.Fatal(err)
	}
	if len(m.files) != 1 || isClosed(a) {
		t.Fatal("mapping dropped while a window still uses it")
	}
	if err := m.ReadAt(got, 0x100000); err != nil {
		t.Fatal(err)
	}
	if err := m.Unmap(0x100000, 0x10000); err != nil {
		t.Fatal(err)
	}
	if len(m.files) != 0 || !isClosed(a) {
		t.Fatal("mapping kept after its last window went")
	}
}

func TestMapRejects(t *testing.T) {
	checkFDs(t)
	fd := memfd(t, 0x10000)
	var m Map
	defer m.Close()
	if err := m.Map(0x10000, 0x10000, 0, dup(t, fd), true); err != nil {
		t.Fatal(err)
	}
	pipeR, pipeW := func() (int, int) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		return p[0], p[1]
	}()
	defer unix.Close(pipeW)
	for _, tc := range []struct {
		name            string
		iova, size, off uint64
		fd              int
		want            unix.Errno
	}{
		{"size 0", 0x40000, 0, 0, -1, unix.EINVAL},
		{"overflow", ^uint64(0) - 0xfff, 0x2000, 0, -1, unix.EINVAL},
		{"overlap start", 0x1f000, 0x2000, 0, -1, unix.EEXIST},
		{"overlap end", 0xf000, 0x2000, 0, -1, unix.EEXIST},
		{"identical", 0x10000, 0x10000, 0, -1, unix.EEXIST},
		{"inside", 0x11000, 0x1000, 0, -1, unix.EEXIST},
		{"beyond file", 0x40000, 0x2000, 0xf000, dup(t, fd), unix.EINVAL},
		{"offset overflow", 0x40000, 0x2000, ^uint64(0), dup(t, fd), unix.EINVAL},
		{"not a regular file", 0x40000, 0x1000, 0, pipeR, unix.EINVAL},
		{"bad fd", 0x40000, 0x1000, 0, 999999, unix.EBADF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := m.Map(tc.iova, tc.size, tc.off, tc.fd, true)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Map = %v, want %v", err, tc.want)
			}
			if tc.fd >= 0 && tc.fd != 999999 && !isClosed(tc.fd) {
				t.Errorf("fd %d not closed after failed Map", tc.fd)
				unix.Close(tc.fd)
			}
		})
	}
	for _, tc := range []struct {
		name       string
		iova, size uint64
	}{
		{"wrong size", 0x10000, 0x1000},
		{"inside", 0x11000, 0xf000},
		{"nothing", 0x90000, 0x1000},
	} {
		t.Run("unmap "+tc.name, func(t *testing.T) {
			if err := m.Unmap(tc.iova, tc.size); !errors.Is(err, unix.ENOENT) {
				t.Fatalf("Unmap = %v, want ENOENT", err)
			}
		})
	}
	if len(m.windows()) != 1 {
		t.Fatalf("%d windows after rejected maps, want 1", len(m.windows()))
	}
}

func TestMapFaults(t *testing.T) {
	checkFDs(t)
	fd := memfd(t, 0x10000)
	var m Map
	defer m.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Map(0x0, 0x8000, 0, dup(t, fd), true))
	must(m.Map(0x8000, 0x8000, 0x8000, dup(t, fd), true)) // adjacent, same file
	must(m.Map(0x20000, 0x1000, 0, dup(t, fd), false))    // read-only
	must(m.Map(0xfffc0000, 0x40000, 0, -1, false))        // fd-less ROM
	for _, tc := range []struct {
		name  string
		gpa   uint64
		n     int
		write bool
	}{
		{"unmapped", 0x10000, 4, false},
		{"straddles two windows", 0x7ffe, 4, false},
		{"runs off the end", 0xfffe, 4, true},
		{"overflow", ^uint64(0) - 1, 4, false},
		{"fd-less window read", 0xfffc0000, 4, false},
		{"fd-less window write", 0xfffc0000, 4, true},
		{"read-only window write", 0x20000, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := make([]byte, tc.n)
			var err error
			if tc.write {
				err = m.WriteAt(p, tc.gpa)
			} else {
				err = m.ReadAt(p, tc.gpa)
			}
			if !errors.Is(err, ErrFault) {
				t.Fatalf("access = %v, want ErrFault", err)
			}
		})
	}
	if err := m.ReadAt(make([]byte, 4), 0x20000); err != nil {
		t.Fatalf("read of read-only window: %v", err)
	}
	must(m.Unmap(0xfffc0000, 0x40000))
}

func TestMapTruncatedFileFaults(t *testing.T) {
	checkFDs(t)
	fd := memfd(t, 0x10000)
	var m Map
	defer m.Close()
	if err := m.Map(0, 0x10000, 0, dup(t, fd), true); err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 0x1000); err != nil {
		t.Fatal(err)
	}
	if err := m.ReadAt(make([]byte, 8), 0x8000); !errors.Is(err, ErrFault) {
		t.Fatalf("read beyond truncated file = %v, want ErrFault", err)
	}
	if err := m.WriteAt(make([]byte, 8), 0x8000); !errors.Is(err, ErrFault) {
		t.Fatalf("write beyond truncated file = %v, want ErrFault", err)
	}
	if _, err := LoadUint32(&m, 0x4000); !errors.Is(err, ErrFault) {
		t.Fatalf("atomic load beyond truncated file = %v, want ErrFault", err)
	}
	if err := m.ReadAt(make([]byte, 8), 0x100); err != nil {
		t.Fatalf("read inside the file: %v", err)
	}
	// A panic in fn that is not a memory fault is not swallowed.
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("panic in Access callback was swallowed")
			}
		}()
		_ = m.Access(0, 4, false, func([]byte) { panic("boom") })
	}()
	// The window survives both.
	if err := m.ReadAt(make([]byte, 8), 0x100); err != nil {
		t.Fatalf("read after panics: %v", err)
	}
}

func TestUnmapWaitsForAccess(t *testing.T) {
	checkFDs(t)
	fd := memfd(t, 0x10000)
	var m Map
	defer m.Close()
	if err := m.Map(0, 0x10000, 0, dup(t, fd), true); err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan struct{}), make(chan struct{})
	accessDone := make(chan error)
	go func() {
		accessDone <- m.Access(0, 8, true, func(b []byte) {
			close(inside)
			<-release
			b[0] = 42 // still mapped: Unmap is waiting for us
		})
	}()
	<-inside
	unmapped := make(chan error)
	go func() { unmapped <- m.Unmap(0, 0x10000) }()
	// New accesses fail at once while the unmap drains.
	deadline := time.Now().Add(time.Minute)
	for {
		err := m.ReadAt(make([]byte, 1), 0)
		if errors.Is(err, ErrFault) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("read during unmap: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-unmapped:
		t.Fatalf("Unmap returned (%v) while an access was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-accessDone; err != nil {
		t.Fatal(err)
	}
	if err := <-unmapped; err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := unix.Pread(fd, b[:], 0); err != nil || b[0] != 42 {
		t.Fatalf("file byte 0 = %d, %v; want 42", b[0], err)
	}
}

func TestUnmapDuringConcurrentAccess(t *testing.T) {
	checkFDs(t)
	fd := memfd(t, 0x40000)
	var m Map
	defer m.Close()
	var stop atomic.Bool
	var ok, faults atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 64)
			for i := 0; !stop.Load(); i++ {
				gpa := uint64((g*4096 + i*64) % 0x20000)
				var err error
				if i%2 == 0 {
					err = m.WriteAt(p, gpa)
				} else {
					err = m.ReadAt(p, gpa)
				}
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrFault):
					faults.Add(1)
				default:
					t.Errorf("access: %v", err)
					return
				}
			}
		}()
	}
	// At least 500 rounds, and on until the accessors have both reached a
	// mapped window and faulted on an unmapped one (a loaded machine may
	// not schedule them at first); bounded, so a run that never races
	// fails instead of passing without testing anything.
	const maxRounds = 200_000
	i := 0
	for ; i < 500 || ok.Load() == 0 || faults.Load() == 0; i++ {
		if i == maxRounds {
			break
		}
		if err := m.Map(0, 0x20000, uint64(i%2)*0x20000, dup(t, fd), true); err != nil {
			t.Fatal(err)
		}
		runtime.Gosched() // let an accessor find the window mapped
		if i%3 == 0 {
			m.UnmapAll()
		} else if err := m.Unmap(0, 0x20000); err != nil {
			t.Fatal(err)
		}
		runtime.Gosched() // and unmapped
	}
	stop.Store(true)
	wg.Wait()
	if ok.Load() == 0 || faults.Load() == 0 {
		t.Fatalf("after %d rounds: %d accesses ok, %d faults; the test raced nothing", i, ok.Load(), faults.Load())
	}
	if len(m.files) != 0 {
		t.Fatalf("%d mappings left after unmapping everything", len(m.files))
	}
}

func TestMapCloseRejectsNewWindows(t *testing.T) {
	checkFDs(t)
	fd := memfd(t, 0x1000)
	var m Map
	if err := m.Map(0, 0x1000, 0, dup(t, fd), true); err != nil {
		t.Fatal(err)
	}
	m.Close()
	d := dup(t, fd)
	if err := m.Map(0, 0x1000, 0, d, true); !errors.Is(err, unix.ENODEV) {
		t.Fatalf("Map after Close = %v, want ENODEV", err)
	}
	if !isClosed(d) {
		t.Fatal("fd not closed by Map after Close")
	}
	if err := m.ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrFault) {
		t.Fatalf("read after Close = %v", err)
	}
}

func TestMapReadOnlyFileAndGrownFile(t *testing.T) {
	checkFDs(t)
	fd := memfd(t, 0x1000)
	var m Map
	defer m.Close()
	ro, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A file that can only be mapped read-only gives a read-only window.
	if err := m.Map(0, 0x1000, 0, ro, true); err != nil {
		t.Fatal(err)
	}
	if err := m.ReadAt(make([]byte, 4), 0); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteAt(make([]byte, 4), 0); !errors.Is(err, ErrFault) {
		t.Fatalf("write through read-only mapping = %v, want ErrFault", err)
	}
	// A writable window of the same file needs a writable mapping: a
	// second one is made.
	if err := m.Map(0x10000, 0x1000, 0, dup(t, fd), true); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteAt([]byte{9}, 0x10000); err != nil {
		t.Fatal(err)
	}
	// The file grows (memory hot-plug): a window beyond the old size gets
	// a new, larger mapping.
	if err := unix.Ftruncate(fd, 0x3000); err != nil {
		t.Fatal(err)
	}
	if err := m.Map(0x20000, 0x1000, 0x2000, dup(t, fd), true); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteAt([]byte{7}, 0x20000); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := unix.Pread(fd, b[:], 0x2000); err != nil || b[0] != 7 {
		t.Fatalf("file byte = %d, %v", b[0], err)
	}
	if err := m.ReadAt(b[:], 0); err != nil || b[0] != 9 {
		t.Fatalf("read-only window sees %d, %v; want 9", b[0], err)
	}
	m.UnmapAll()
	if len(m.files) != 0 {
		t.Fatalf("%d mappings left", len(m.files))
	}
}

// TestMapRefusesFilesWhosePageFaultsCanBlock: guest RAM must be a memfd or a
// file on tmpfs or hugetlbfs; a file on a disk, FUSE or NFS file system is
// refused with EINVAL (and its fd closed), because a device access faulting
// on it could hang under the device's locks.
func TestMapRefusesFilesWhosePageFaultsCanBlock(t *testing.T) {
	checkFDs(t)
	onDisk := func() *os.File {
		for _, dir := range []string{".", "/var/tmp", os.TempDir()} {
			f, err := os.CreateTemp(dir, "dma-disk-*")
			if err != nil {
				continue
			}
			var fs unix.Statfs_t
			if unix.Fstatfs(int(f.Fd()), &fs) == nil && uint32(fs.Type) != unix.TMPFS_MAGIC && uint32(fs.Type) != unix.HUGETLBFS_MAGIC {
				return f
			}
			f.Close()
			os.Remove(f.Name())
		}
		return nil
	}()
	if onDisk == nil {
		t.Skip("no directory on a non-tmpfs file system to create a file in")
	}
	t.Cleanup(func() { onDisk.Close(); os.Remove(onDisk.Name()) })
	if err := onDisk.Truncate(0x10000); err != nil {
		t.Fatal(err)
	}
	var m Map
	defer m.Close()
	fd := dup(t, int(onDisk.Fd()))
	err := m.Map(0, 0x10000, 0, fd, true)
	if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "only memfd, tmpfs and hugetlbfs") {
		t.Fatalf("Map of a file on disk = %v, want EINVAL naming the accepted kinds", err)
	}
	if !isClosed(fd) {
		t.Fatal("refused fd left open")
	}

	shm, err := os.CreateTemp("/dev/shm", "dma-shm-*")
	if err != nil {
		t.Logf("no /dev/shm (%v): the tmpfs case is left to the memfd tests", err)
		return
	}
	t.Cleanup(func() { shm.Close(); os.Remove(shm.Name()) })
	if err := shm.Truncate(0x10000); err != nil {
		t.Fatal(err)
	}
	if err := m.Map(0, 0x10000, 0, dup(t, int(shm.Fd())), true); err != nil {
		t.Fatalf("Map of a tmpfs file: %v", err)
	}
}

// TestMapBoundsBackingFiles: one client cannot hold more than MaxFiles
// backing files (a descriptor and a mapping each); the next is refused with
// ENOSPC and its fd closed, and unmapping frees a slot.
func TestMapBoundsBackingFiles(t *testing.T) {
	checkFDs(t)
	var m Map
	defer m.Close()
	for i := range MaxFiles {
		if err := m.Map(uint64(i)*0x1000, 0x1000, 0, dup(t, memfd(t, 0x1000)), true); err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
	}
	fd := dup(t, memfd(t, 0x1000))
	if err := m.Map(MaxFiles*0x1000, 0x1000, 0, fd, true); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("file %d: %v, want ENOSPC", MaxFiles, err)
	}
	if !isClosed(fd) {
		t.Fatal("refused fd left open")
	}
	if err := m.Unmap(0, 0x1000); err != nil {
		t.Fatal(err)
	}
	if err := m.Map(MaxFiles*0x1000, 0x1000, 0, dup(t, memfd(t, 0x1000)), true); err != nil {
		t.Fatalf("after an unmap: %v", err)
	}
}
