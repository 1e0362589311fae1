// Command hcaemu-initramfs writes the guest's initramfs archives. It is the
// provisioning side of hcaemu, kept out of the hcaemu binary so that
// "hcaemu serve" links nothing of u-root: "hcaemu run" builds it at
// provisioning time in the guest's Go module (the one that pins u-root, see
// ../go.mod.txt) and runs it as a tool.
//
//	hcaemu-initramfs build -o OUT -gomod DIR -goroot DIR -tmp DIR [-file SRC:DST ...] [-command PKG ...]
//	hcaemu-initramfs append -base BASE -o OUT -name NAME [-file SRC:DST ...] < CONTENT
//
// build makes the base initramfs with mkuimage: a u-root busybox of the
// given commands (built in the module at -gomod), the files, gosh running
// /hcaemu/init.sh as uinit. append writes BASE followed by a newc archive
// holding one executable file NAME with the content read from stdin (the
// kernel unpacks concatenated archives): the per-run command of a guest, and
// the files given (a run's own kernel modules, which replace those of BASE).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/u-root/gobusybox/src/pkg/golang"
	"github.com/u-root/mkuimage/cpio"
	"github.com/u-root/mkuimage/uimage"
	"github.com/u-root/uio/llog"
)

// maxContent bounds the file append puts in the archive (a command script).
const maxContent = 1 << 20

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hcaemu-initramfs build|append [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = buildMain(os.Args[2:])
	case "append":
		err = appendMain(os.Args[2:], os.Stdin)
	default:
		err = fmt.Errorf("unknown command %q (want build or append)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "hcaemu-initramfs: %v\n", err)
		os.Exit(1)
	}
}

func buildMain(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	out := fs.String("o", "", "output archive")
	gomod := fs.String("gomod", "", "Go module the u-root commands are built in")
	goroot := fs.String("goroot", "", "GOROOT of the go command")
	tmp := fs.String("tmp", "", "scratch directory")
	var files, commands listFlag
	fs.Var(&files, "file", "SRC:DST file to include (repeatable)")
	fs.Var(&commands, "command", "Go package of a busybox command (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *gomod == "" || *goroot == "" || *tmp == "" || len(commands) == 0 {
		return errors.New("build: -o, -gomod, -goroot, -tmp and at least one -command are required")
	}
	logger := llog.New(slog.LevelInfo, llog.WritePrintf(os.Stderr))
	return uimage.Create(logger,
		uimage.WithReplaceEnv(golang.Default(golang.WithWorkingDir(*gomod), golang.WithGOROOT(*goroot), golang.DisableCGO())),
		uimage.WithBaseArchive(uimage.DefaultRamfs()),
		uimage.WithBusyboxCommands(commands...),
		uimage.WithSkipLDD(),
		uimage.WithFiles(files...),
		uimage.WithInit("init"),
		uimage.WithUinit("gosh", "/hcaemu/init.sh"),
		uimage.WithShell("gosh"),
		uimage.WithTempDir(*tmp),
		uimage.WithCPIOOutput(*out),
	)
}

func appendMain(args []string, stdin io.Reader) error {
	fs := flag.NewFlagSet("append", flag.ContinueOnError)
	base := fs.String("base", "", "archive to start with")
	out := fs.String("o", "", "output archive")
	name := fs.String("name", "", "path of the file in the archive")
	var files listFlag
	fs.Var(&files, "file", "SRC:DST file to add (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *base == "" || *out == "" || *name == "" {
		return errors.New("append: -base, -o and -name are required")
	}
	content, err := io.ReadAll(io.LimitReader(stdin, maxContent+1))
	if err != nil {
		return err
	}
	if len(content) > maxContent {
		return fmt.Errorf("append: content longer than %d bytes", maxContent)
	}
	records := []cpio.Record{cpio.StaticFile(*name, string(content), 0o755)}
	for _, f := range files {
		src, dst, ok := strings.Cut(f, ":")
		if !ok || src == "" || dst == "" {
			return fmt.Errorf("append: -file %q: want SRC:DST", f)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("append: -file: %v", err)
		}
		records = append(records, cpio.StaticFile(dst, string(b), 0o644))
	}
	return appendFile(*base, *out, records)
}

// appendFile writes base, zero padding to a 512-byte boundary, then a newc
// archive with the records.
func appendFile(base, out string, records []cpio.Record) error {
	in, err := os.Open(base)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, in)
	if err == nil {
		_, err = f.Write(make([]byte, (512-n%512)%512))
	}
	if err == nil {
		err = writeArchive(f, records)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeArchive writes a newc archive holding the records (their
// directories must be in the base archive).
func writeArchive(w io.Writer, records []cpio.Record) error {
	rw := cpio.Newc.Writer(w)
	if err := cpio.WriteRecords(rw, records); err != nil {
		return err
	}
	return cpio.WriteTrailer(rw)
}
