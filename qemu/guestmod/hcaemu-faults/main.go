// Command hcaemu-faults drives the fault plan of "hcaemu run" from inside a
// guest. It writes one live-control command to the guest's virtio-serial
// port org.hcaemu.faults, which the run connects to its fault injector, and
// prints the reply. The verbs, the rule syntax and the output are those of
// "hcaemu faults --control SOCK" on the host (docs/faults.md):
//
//	hcaemu-faults add RULE          (RULE: JSON, or @FILE)
//	hcaemu-faults rm|enable|disable NAME
//	hcaemu-faults list|stats|clear
//
// The exit status is 0 when the command succeeded, 1 on an error reply or
// when the port fails or does not answer in time, 2 on a usage error.
//
// The port is a byte stream that outlives the command: an earlier command
// may have been killed before it read its reply, or left half a line. So a
// command starts with a newline (ending any half line, which the host then
// answers with an error) and carries a random id, and the replies without
// that id are skipped.
//
// It is built at provisioning time in the guest's Go module, with the
// standard library only, and put in the guest's initramfs as
// /bin/hcaemu-faults.
package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// PortName is the virtio-serial port's name (QEMU's virtserialport name=).
const PortName = "org.hcaemu.faults"

// maxReply bounds a reply line (the list of many rules).
const maxReply = 16 << 20

const usage = `usage: hcaemu-faults [--port PATH] [--timeout D] add RULE     (RULE: JSON, or @FILE)
       hcaemu-faults [--port PATH] [--timeout D] rm|enable|disable NAME
       hcaemu-faults [--port PATH] [--timeout D] list|stats|clear

Live control of the fault plan of the "hcaemu run" this guest runs in,
through the virtio-serial port ` + PortName + `: the commands and output
of "hcaemu faults --control SOCK" on the host (docs/faults.md).`

// request and response are the JSON lines of the control socket
// (fault.Request and fault.Response in hcaemu); rules and stats are
// printed as they come.
type request struct {
	Op   string          `json:"op"`
	Name string          `json:"name,omitempty"`
	Rule json.RawMessage `json:"rule,omitempty"`
	ID   string          `json:"id,omitempty"`
}

type response struct {
	OK    bool              `json:"ok"`
	Error string            `json:"error,omitempty"`
	Name  string            `json:"name,omitempty"`
	Rules []json.RawMessage `json:"rules,omitempty"`
	Stats json.RawMessage   `json:"stats,omitempty"`
	ID    string            `json:"id,omitempty"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, openPort))
}

// run is the command; open opens the port (path "" = find it) and gives up
// at the deadline.
func run(args []string, stdout, stderr io.Writer, open func(path string, deadline time.Time) (io.ReadWriteCloser, error)) int {
	fs := flag.NewFlagSet("hcaemu-faults", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	portPath := fs.String("port", "", "the port's device (default /dev/virtio-ports/"+PortName+", else found in /sys/class/virtio-ports)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up when the port is busy or silent this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "hcaemu-faults: %v\n%s\n", err, usage)
		return 2
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "hcaemu-faults: "+format+"\n%s\n", append(a, usage)...)
		return 2
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usageErr("no command")
	}
	if *timeout <= 0 {
		return usageErr("--timeout must be positive")
	}
	op, operands := rest[0], rest[1:]
	req := request{Op: op}
	switch op {
	case "add":
		if len(operands) != 1 {
			return usageErr("add takes one rule")
		}
		rule := operands[0]
		if name, ok := strings.CutPrefix(rule, "@"); ok {
			b, err := os.ReadFile(name)
			if err != nil {
				fmt.Fprintf(stderr, "hcaemu-faults: %v\n", err)
				return 1
			}
			rule = string(b)
		}
		if !json.Valid([]byte(rule)) {
			return usageErr("add: the rule is not JSON: %s", rule)
		}
		// One line on the port: the rule compacted.
		var line bytes.Buffer
		json.Compact(&line, []byte(rule))
		req.Rule = line.Bytes()
	case "rm", "enable", "disable":
		if len(operands) != 1 {
			return usageErr("%s takes a rule's name", op)
		}
		req.Name = operands[0]
	case "list", "stats", "clear":
		if len(operands) != 0 {
			return usageErr("%s takes no operand", op)
		}
	default:
		return usageErr("unknown command %q", op)
	}
	var id [8]byte
	rand.Read(id[:])
	req.ID = hex.EncodeToString(id[:])

	deadline := time.Now().Add(*timeout)
	port, err := open(*portPath, deadline)
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu-faults: %v\n", err)
		return 1
	}
	// A silent host: closing the port ends the read.
	timedOut := make(chan struct{})
	timer := time.AfterFunc(time.Until(deadline), func() {
		close(timedOut)
		port.Close()
	})
	rsp, err := exchange(port, req)
	if timer.Stop() {
		port.Close()
	} else {
		<-timedOut // the timer closed the port
		if err != nil {
			err = fmt.Errorf("no reply within %s", *timeout)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu-faults: %v\n", err)
		return 1
	}
	if !rsp.OK {
		fmt.Fprintf(stderr, "hcaemu-faults: %s: %s\n", op, rsp.Error)
		return 1
	}
	switch {
	case rsp.Stats != nil:
		printIndented(stdout, rsp.Stats)
	case op == "list":
		if rsp.Rules == nil {
			rsp.Rules = []json.RawMessage{}
		}
		b, _ := json.Marshal(rsp.Rules)
		printIndented(stdout, b)
	case rsp.Name != "":
		fmt.Fprintf(stdout, "%s: %s\n", op, rsp.Name)
	}
	return 0
}

// exchange writes the request and returns the reply carrying its id.
func exchange(port io.ReadWriter, req request) (response, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return response{}, err
	}
	if _, err := port.Write(append(append([]byte("\n"), b...), '\n')); err != nil {
		return response{}, fmt.Errorf("writing to the port: %w", err)
	}
	rd := bufio.NewReaderSize(port, 64<<10)
	for {
		line, err := readLine(rd)
		if err != nil {
			return response{}, fmt.Errorf("reading the port: %w", err)
		}
		var rsp response
		if json.Unmarshal(line, &rsp) == nil && rsp.ID == req.ID {
			return rsp, nil
		}
		// A stale reply, or the host's answer to a half line.
	}
}

// readLine reads one line of at most maxReply bytes.
func readLine(rd *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := rd.ReadSlice('\n')
		if len(line)+len(chunk) > maxReply {
			return nil, fmt.Errorf("a reply longer than %d bytes", maxReply)
		}
		line = append(line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func printIndented(w io.Writer, raw []byte) {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		b.Reset()
		b.Write(raw)
	}
	b.WriteByte('\n')
	w.Write(b.Bytes())
}

// findPort returns the port's device: the udev-style link the guest init
// makes, else the vportNpM whose sysfs name is PortName.
func findPort() (string, error) {
	link := "/dev/virtio-ports/" + PortName
	if _, err := os.Stat(link); err == nil {
		return link, nil
	}
	names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
	for _, n := range names {
		if b, err := os.ReadFile(n); err == nil && strings.TrimSpace(string(b)) == PortName {
			return "/dev/" + filepath.Base(filepath.Dir(n)), nil
		}
	}
	return "", fmt.Errorf("no virtio-serial port %s (neither %s nor a /sys/class/virtio-ports/*/name saying so): "+
		"this guest does not run under \"hcaemu run\", or its kernel lacks CONFIG_VIRTIO_CONSOLE", PortName, link)
}

// openPort opens the port for reading and writing. A port is open in one
// process at a time (EBUSY): another hcaemu-faults is waited for.
func openPort(path string, deadline time.Time) (io.ReadWriteCloser, error) {
	if path == "" {
		var err error
		if path, err = findPort(); err != nil {
			return nil, err
		}
	}
	for {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
