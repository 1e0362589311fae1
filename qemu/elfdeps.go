package qemu

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// resolveIn resolves p (an absolute path inside the root file system root)
// following symlinks as the root's own programs would see them: absolute
// link targets are relative to root. It returns the resolved path inside
// root (absolute, without root).
func resolveIn(root, p string) (string, error) {
	const maxLinks = 40
	links := 0
	todo := strings.Split(strings.TrimPrefix(path.Clean("/"+p), "/"), "/")
	cur := "/"
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		links++
		if links > maxLinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		t, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(t, "/") {
			cur = "/"
		}
		todo = append(strings.Split(t, "/"), todo...)
	}
	return cur, nil
}

// libDirs is the search path of the root file system's dynamic loader
// (Debian multiarch, merged /usr).
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// elfDeps returns the ELF interpreter and the DT_NEEDED libraries of the
// file at p inside root, as absolute paths inside root (not resolved).
func elfDeps(root, p string) (interp string, needed []string, err error) {
	rp, err := resolveIn(root, p)
	if err != nil {
		return "", nil, err
	}
	f, err := elf.Open(filepath.Join(root, rp))
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				return "", nil, fmt.Errorf("%s: reading PT_INTERP: %w", p, err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		if errors.Is(err, elf.ErrNoSymbols) {
			return interp, nil, nil
		}
		return "", nil, fmt.Errorf("%s: %w", p, err)
	}
	var search []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				d = strings.ReplaceAll(d, "$ORIGIN", path.Dir(rp))
				d = strings.ReplaceAll(d, "${ORIGIN}", path.Dir(rp))
				if strings.HasPrefix(d, "/") {
					search = append(search, d)
				}
			}
		}
	}
	search = append(search, libDirs...)
	for _, lib := range libs {
		found := ""
		for _, d := range search {
			cand := path.Join(d, lib)
			if _, err := resolveIn(root, cand); err == nil {
				found = cand
				break
			}
		}
		if found == "" {
			return "", nil, fmt.Errorf("%s: library %s not found in %s", p, lib, root)
		}
		needed = append(needed, found)
	}
	return interp, needed, nil
}

// fileSet collects files of a root file system for an initramfs: each entry
// maps a path in the archive to the host file holding its content (symlinks
// in between are dereferenced).
type fileSet struct {
	root  string
	files map[string]string // archive path (no leading /) -> host path
}

func newFileSet(root string) *fileSet {
	return &fileSet{root: root, files: map[string]string{}}
}

// add adds p (inside root) at the same path in the archive, dereferenced.
func (s *fileSet) add(p string) error {
	return s.addAs(p, p)
}

// addAs adds the file at p (inside root) at dst in the archive.
func (s *fileSet) addAs(p, dst string) error {
	dst = strings.TrimPrefix(path.Clean("/"+dst), "/")
	if _, ok := s.files[dst]; ok {
		return nil
	}
	rp, err := resolveIn(s.root, p)
	if err != nil {
		return err
	}
	fi, err := os.Stat(filepath.Join(s.root, rp))
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	s.files[dst] = filepath.Join(s.root, rp)
	return nil
}

// addELF adds an executable or library and, recursively, its interpreter and
// libraries.
func (s *fileSet) addELF(p string) error {
	dst := strings.TrimPrefix(path.Clean("/"+p), "/")
	if _, ok := s.files[dst]; ok {
		return nil
	}
	if err := s.add(p); err != nil {
		return err
	}
	interp, needed, err := elfDeps(s.root, p)
	if err != nil {
		return err
	}
	if interp != "" {
		if err := s.add(interp); err != nil {
			return fmt.Errorf("%s: interpreter %s: %w", p, interp, err)
		}
	}
	for _, n := range needed {
		if err := s.addELF(n); err != nil {
			return err
		}
	}
	return nil
}

// specs returns the entries in mkuimage's "hostpath:archivepath" form.
func (s *fileSet) specs() []string {
	out := make([]string, 0, len(s.files))
	for dst, src := range s.files {
		out = append(out, src+":"+dst)
	}
	return out
}
