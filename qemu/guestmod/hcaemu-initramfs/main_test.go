package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/u-root/mkuimage/cpio"
)

func TestWriteArchive(t *testing.T) {
	var b bytes.Buffer
	if err := writeArchive(&b, []cpio.Record{cpio.StaticFile("hcaemu/cmd.sh", "echo hi\n", 0o755)}); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if !strings.HasPrefix(s, "070701") || b.Len()%4 != 0 || !strings.Contains(s, "hcaemu/cmd.sh\x00") ||
		!strings.Contains(s, "echo hi\n") || !strings.Contains(s, "TRAILER!!!\x00") {
		t.Errorf("bad archive %q", s)
	}
	// Header of the first file: size field (7th) is 8, name size (12th) 14.
	if got := s[6+6*8 : 6+7*8]; got != "00000008" {
		t.Errorf("filesize field %q", got)
	}
	if got := s[6+11*8 : 6+12*8]; got != "0000000E" {
		t.Errorf("namesize field %q", got)
	}
	if cpio, err := exec.LookPath("cpio"); err == nil {
		dir := t.TempDir()
		cmd := exec.Command(cpio, "-i", "-d", "--quiet")
		cmd.Dir, cmd.Stdin = dir, bytes.NewReader(b.Bytes())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cpio -i: %v\n%s", err, out)
		}
		got, err := os.ReadFile(filepath.Join(dir, "hcaemu/cmd.sh"))
		if err != nil || string(got) != "echo hi\n" {
			t.Errorf("cpio -i: %q, %v", got, err)
		}
		if fi, err := os.Stat(filepath.Join(dir, "hcaemu/cmd.sh")); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("cpio -i: mode %v, %v", fi.Mode(), err)
		}
	}
}

func TestAppend(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.cpio")
	if err := os.WriteFile(base, []byte("070701base"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "initrd.cpio")
	ko := filepath.Join(dir, "vmw_pvrdma.ko")
	if err := os.WriteFile(ko, []byte("\x7fELF module"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		content string
		wantErr bool
	}{
		{"ok", []string{"-base", base, "-o", out, "-name", "hcaemu/cmd.sh"}, "echo from-cmd\n", false},
		{"files", []string{"-base", base, "-o", out, "-name", "hcaemu/cmd.sh", "-file", ko + ":modules/vmw_pvrdma.ko"}, "echo from-cmd\n", false},
		{"bad file", []string{"-base", base, "-o", out, "-name", "a", "-file", ko}, "x", true},
		{"missing file", []string{"-base", base, "-o", out, "-name", "a", "-file", ko + "x:modules/x.ko"}, "x", true},
		{"no name", []string{"-base", base, "-o", out}, "x", true},
		{"no base", []string{"-base", filepath.Join(dir, "none"), "-o", out, "-name", "a"}, "x", true},
		{"too long", []string{"-base", base, "-o", out, "-name", "a"}, strings.Repeat("x", maxContent+1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := appendMain(tt.args, strings.NewReader(tt.content))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			// The base, zero padding to 512 bytes, then the archive.
			if !bytes.HasPrefix(b, []byte("070701base\x00")) || !bytes.Equal(b[512:518], []byte("070701")) ||
				!bytes.Contains(b[512:], []byte("hcaemu/cmd.sh\x00")) || !bytes.Contains(b, []byte(tt.content)) {
				t.Errorf("bad initrd %q", b)
			}
			if tt.name == "files" && (!bytes.Contains(b, []byte("modules/vmw_pvrdma.ko\x00")) || !bytes.Contains(b, []byte("\x7fELF module"))) {
				t.Errorf("initrd lacks the module file: %q", b)
			}
		})
	}
}
