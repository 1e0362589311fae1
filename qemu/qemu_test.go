package qemu

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMirrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		err            bool
	}{
		{name: "bookworm", in: "http://deb.debian.org/debian-security/ bookworm-security\nhttp://deb.debian.org/debian/ bookworm\nhttp://deb.debian.org/debian/ bookworm-updates\n", want: "http://deb.debian.org/debian/"},
		{name: "no slash", in: "http://mirror.example/debian bookworm\n", want: "http://mirror.example/debian/"},
		{name: "updates only", in: "http://m.example/debian/ bookworm-updates\n", want: "http://m.example/debian/"},
		{name: "security only", in: "http://security.debian.org/debian-security bookworm-security\n", err: true},
		{name: "empty", in: "", err: true},
		{name: "cdrom skipped", in: "cdrom://[Debian]/ bookworm\nhttps://m.example/debian/ bookworm\n", want: "https://m.example/debian/"},
	} {
		got, err := parseMirrors(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("%s: got %q, want error", tc.name, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

func TestParseMemory(t *testing.T) {
	for in, want := range map[string]int{"1G": 1024, "1g": 1024, "1536M": 1536, "2GiB": 2048, "512": 512, "768MB": 768} {
		got, err := ParseMemory(in)
		if err != nil || got != want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1G", "0", "64M", "1T"} {
		if _, err := ParseMemory(in); err == nil {
			t.Errorf("ParseMemory(%q): want error", in)
		}
	}
}

func TestParseGuestNet(t *testing.T) {
	for _, tc := range []struct {
		in      string
		guests  int
		want    string // the prefix
		wantErr string // or a part of the error
	}{
		{"10.0.0.1/24", 8, "10.0.0.1/24", ""},
		{"10.0.1.9", 2, "10.0.1.9/24", ""},
		{"192.168.7.65/26", 2, "192.168.7.65/26", ""},
		{"10.0.0.250/24", 6, "", "guest 5's address 10.0.0.255 is not a host of 10.0.0.0/24"},
		{"10.0.0.0/24", 1, "", "guest 0's address 10.0.0.0 is not a host"},
		{"10.0.0.1/30", 3, "", "guest 2's address 10.0.0.3 is not a host"},
		{"fe80::1/64", 1, "", "is not an IPv4 ADDR[/LEN]"},
		{"10.0.0.1/31", 1, "", "the prefix length must be 8..30"},
		{"ten", 1, "", `"ten/24" is not an IPv4`},
	} {
		p, err := ParseGuestNet(tc.in, tc.guests)
		switch {
		case tc.wantErr == "" && (err != nil || p.String() != tc.want):
			t.Errorf("ParseGuestNet(%q, %d) = %s, %v; want %s", tc.in, tc.guests, p, err, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseGuestNet(%q, %d) = %s, %v; want an error with %q", tc.in, tc.guests, p, err, tc.wantErr)
		}
	}
	first := netip.MustParsePrefix("10.0.1.254/23")
	if a := GuestIP(first, 3); a != netip.MustParseAddr("10.0.2.1") {
		t.Errorf("GuestIP across a byte: %s", a)
	}
	if m := GuestMAC(netip.MustParseAddr("10.0.2.1")); m != [6]byte{0x52, 0x54, 10, 0, 2, 1} {
		t.Errorf("GuestMAC %x", m)
	}
}

func TestQEMUArgs(t *testing.T) {
	g := guestSpec{index: 1, net: DefaultGuestNet, memoryMiB: 1024, accel: "tcg", kernel: "/c/guest/vmlinuz", initrd: "/c/run/x/initrd.cpio",
		netSocket: "/c/run/x/g1.net", devSocket: "/c/run/x/hca1.sock"}
	want := []string{
		"-machine", "q35", "-accel", "tcg", "-cpu", "max", "-smp", "1",
		"-nodefaults", "-nographic", "-serial", "stdio", "-no-reboot",
		"-kernel", "/c/guest/vmlinuz", "-initrd", "/c/run/x/initrd.cpio",
		"-append", "console=ttyS0 panic=-1 quiet no_timer_check hcaemu.guest=1 hcaemu.ip=10.0.0.2/24 hcaemu.server=10.0.0.1",
		"-netdev", "stream,id=net0,server=off,addr.type=unix,addr.path=/c/run/x/g1.net,reconnect-ms=100",
		"-m", "1024M",
		"-object", "memory-backend-memfd,id=mem,size=1024M,share=on",
		"-machine", "memory-backend=mem",
		"-device", "vmxnet3,netdev=net0,mac=52:54:0a:00:00:02,romfile=,addr=0x4.0,multifunction=on",
		"-device", `{"driver":"vfio-user-pci","socket":{"type":"unix","path":"/c/run/x/hca1.sock"},"addr":"0x4.1","x-no-posted-writes":true}`,
	}
	if d := cmp.Diff(want, qemuArgs(g)); d != "" {
		t.Errorf("qemuArgs (-want +got):\n%s", d)
	}
	g.devSocket, g.index = "", 0
	got := qemuArgs(g)
	if strings.Contains(strings.Join(got, " "), "vfio-user") {
		t.Errorf("no device socket, but vfio-user-pci in %q", got)
	}
	if a := got[18]; a != "console=ttyS0 panic=-1 quiet no_timer_check hcaemu.guest=0 hcaemu.ip=10.0.0.1/24" {
		t.Errorf("guest 0 cmdline %q", a)
	}
	// Two vCPUs and two shares: slots 5 and 6, tags on the command line.
	g.cpus = 2
	g.shares = []guestShare{{hostDir: "/run/hcaemu-share0", guestDir: "/mnt/host"}, {hostDir: "/a,b", guestDir: "/results"}}
	joined := strings.Join(qemuArgs(g), " ")
	for _, want := range []string{
		"-smp 2 ",
		"hcaemu.guest=0 hcaemu.ip=10.0.0.1/24 hcaemu.share=hcaemu0:/mnt/host hcaemu.share=hcaemu1:/results ",
		"-fsdev local,id=fs0,path=/run/hcaemu-share0,security_model=none -device virtio-9p-pci,fsdev=fs0,mount_tag=hcaemu0,addr=0x5",
		"-fsdev local,id=fs1,path=/a,,b,security_model=none -device virtio-9p-pci,fsdev=fs1,mount_tag=hcaemu1,addr=0x6",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q:\n%s", want, joined)
		}
	}
	// The fault-control port: a virtio-serial controller at its own slot,
	// its port named for hcaemu-faults, on a chardev connecting to the
	// run's socket.
	if strings.Contains(joined, "virtio-serial") {
		t.Errorf("a virtio-serial port without a faults socket:\n%s", joined)
	}
	g.faults = "/c/run/x/g0,faults"
	joined = strings.Join(qemuArgs(g), " ")
	if want := " -chardev socket,id=hcaemufaults,path=/c/run/x/g0,,faults,reconnect-ms=1000 " +
		"-device virtio-serial-pci,id=hcaemuserial,addr=0x10 " +
		"-device virtserialport,bus=hcaemuserial.0,chardev=hcaemufaults,name=org.hcaemu.faults"; !strings.HasSuffix(joined, want) {
		t.Errorf("args lack %q:\n%s", want, joined)
	}
	// An image: a read-only virtio disk after the shares, named on the
	// command line.
	g.image = "/c/images/0123/root.ext4"
	joined = strings.Join(qemuArgs(g), " ")
	for _, want := range []string{
		"hcaemu.share=hcaemu1:/results hcaemu.image=1 ",
		"-drive file=/c/images/0123/root.ext4,format=raw,if=none,id=image,readonly=on -device virtio-blk-pci,drive=image,addr=0x11",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q:\n%s", want, joined)
		}
	}
	// A stream netdev instead of the segment (a measurement's reference).
	g.streamPath, g.streamServer = "/c/run/x/stream.net", true
	if joined = strings.Join(qemuArgs(g), " "); !strings.Contains(joined, " -netdev stream,id=net0,server=on,addr.type=unix,addr.path=/c/run/x/stream.net ") {
		t.Errorf("stream server's netdev: %s", joined)
	}
	g.streamServer = false
	if joined = strings.Join(qemuArgs(g), " "); !strings.Contains(joined, " -netdev stream,id=net0,server=off,addr.type=unix,addr.path=/c/run/x/stream.net,reconnect-ms=100 ") {
		t.Errorf("stream client's netdev: %s", joined)
	}
	g.streamPath = ""
	// Soft-RoCE: the guest init is told to make rxe0.
	g.rxe = true
	if joined = strings.Join(qemuArgs(g), " "); !strings.Contains(joined, " hcaemu.image=1 hcaemu.rxe=1 ") {
		t.Errorf("soft-RoCE guest's cmdline: %s", joined)
	}
	// Both HCAs: the ConnectX's vfio-user-pci at function 0 of its own
	// slot, after the PVRDMA function's.
	g.rxe, g.devSocket, g.mlx5Socket = false, "/c/run/x/hca0.sock", "/c/run/x/hca0-mlx5.sock"
	joined = strings.Join(qemuArgs(g), " ")
	if want := `"addr":"0x4.1","x-no-posted-writes":true} -device {"driver":"vfio-user-pci","socket":{"type":"unix","path":"/c/run/x/hca0-mlx5.sock"},"addr":"0x12.0","x-no-posted-writes":true} `; !strings.Contains(joined, want) {
		t.Errorf("args lack %q:\n%s", want, joined)
	}
	g.rxe, g.devSocket, g.mlx5Socket = true, "", ""
	// Jumbo frames: the guest init sets eth0's MTU.
	g.mtu = 9000
	if joined = strings.Join(qemuArgs(g), " "); !strings.Contains(joined, " hcaemu.rxe=1 hcaemu.mtu=9000 ") {
		t.Errorf("jumbo-frame guest's cmdline: %s", joined)
	}
}

func TestVFIOUserDeviceJSON(t *testing.T) {
	var v map[string]any
	s := VFIOUserDevice(`/tmp/a "b".sock`, 5, 1)
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	if v["addr"] != "0x5.1" || v["x-no-posted-writes"] != true || v["socket"].(map[string]any)["path"] != `/tmp/a "b".sock` {
		t.Errorf("bad device JSON %s", s)
	}
}

func TestParseLine(t *testing.T) {
	type res struct {
		Ev     event
		Status int
		Text   string
	}
	const nonce = "0123456789abcdef"
	for in, want := range map[string]res{
		"HCAEMU-EXIT " + nonce + " 0":                      {evExit, 0, ""},
		"HCAEMU-EXIT " + nonce + " 137\r":                  {evExit, 137, ""},
		"no newline at the endHCAEMU-EXIT " + nonce + " 3": {evExit, 3, "no newline at the end"},
		"HCAEMU-STARTED " + nonce:                          {evStarted, 0, ""},
		"HCAEMU-READY " + nonce:                            {evReady, 0, ""},
		"HCAEMU-READY":                                     {evReadyLine, 0, ""},
		" HCAEMU-READY \r":                                 {evReadyLine, 0, ""},
		"HCAEMU-WAIT":                                      {evWait, 0, ""},
		"HCAEMU-GO " + nonce + " 1 listen":                 {evIgnore, 0, ""},
		"HCAEMU-FAIL insmod vmw_pvrdma":                    {evFail, 0, "insmod vmw_pvrdma"},
		"hello HCAEMU-STARTED " + nonce:                    {evOutput, 0, ""},
		"64 bytes from 10.0.0.2: icmp_seq=1 ":              {evOutput, 0, ""},
		"HCAEMU-EXIT " + nonce + " x":                      {evOutput, 0, ""},
		"HCAEMU-EXIT " + nonce + " 256":                    {evOutput, 0, ""},
		"HCAEMU-EXIT " + nonce + " 0 trailing":             {evOutput, 0, ""},
		// The command cannot forge the markers: it does not know the nonce.
		"HCAEMU-EXIT 0":                   {evOutput, 0, ""},
		"HCAEMU-EXIT fedcba9876543210 0":  {evOutput, 0, ""},
		"HCAEMU-EXIT " + nonce[:8] + " 0": {evOutput, 0, ""},
		"HCAEMU-STARTED":                  {evOutput, 0, ""},
		"HCAEMU-STARTED fedcba9876543210": {evOutput, 0, ""},
		"HCAEMU-READY fedcba9876543210":   {evOutput, 0, ""},
		"HCAEMU-GO":                       {evOutput, 0, ""},
		"HCAEMU-GO fedcba9876543210 1 x":  {evOutput, 0, ""},
	} {
		ev, st, text := parseLine(in, nonce)
		if d := cmp.Diff(want, res{ev, st, text}); d != "" {
			t.Errorf("parseLine(%q) (-want +got):\n%s", in, d)
		}
	}
}

func TestCommandScript(t *testing.T) {
	if got := CommandScript([]string{"ping", "-c", "1", "$HCAEMU_SERVER_IP"}); got != "ping -c 1 $HCAEMU_SERVER_IP\n" {
		t.Errorf("got %q", got)
	}
	if got := CommandScript([]string{"echo a; echo b"}); got != "echo a; echo b\n" {
		t.Errorf("got %q", got)
	}
}

func TestModuleOrder(t *testing.T) {
	deps := `ib_core module
ib_uverbs module ib_core
vmxnet3 module
configfs builtin
rdma_cm module iw_cm ib_core ib_cm configfs
ib_cm module ib_core
iw_cm module ib_core
vmw_pvrdma module ib_core ib_uverbs
`
	got, err := moduleOrder(deps, []string{"ib_core", "ib_uverbs", "vmxnet3", "rdma_cm", "vmw_pvrdma"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ib_core", "ib_uverbs", "vmxnet3", "iw_cm", "ib_cm", "rdma_cm", "vmw_pvrdma"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("order (-want +got):\n%s", d)
	}
	if _, err := moduleOrder(deps, []string{"nope"}); err == nil {
		t.Error("missing module: want error")
	}
	if _, err := moduleOrder("a module b\nb module a\n", []string{"a"}); err == nil {
		t.Error("cycle: want error")
	}
}

func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/lib/x86_64-linux-gnu"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libx.so.1.2"), []byte("x"), 0o644))
	must(os.Symlink("usr/lib", filepath.Join(root, "lib")))
	must(os.Symlink("libx.so.1.2", filepath.Join(root, "usr/lib/x86_64-linux-gnu/libx.so.1")))
	must(os.MkdirAll(filepath.Join(root, "usr/lib64"), 0o755))
	// An absolute link must resolve inside root, not on the host.
	must(os.Symlink("/lib/x86_64-linux-gnu/libx.so.1", filepath.Join(root, "usr/lib64/ld.so")))
	for in, want := range map[string]string{
		"/lib/x86_64-linux-gnu/libx.so.1":                "/usr/lib/x86_64-linux-gnu/libx.so.1.2",
		"/usr/lib64/ld.so":                               "/usr/lib/x86_64-linux-gnu/libx.so.1.2",
		"/usr/lib64/../lib/x86_64-linux-gnu/libx.so.1.2": "/usr/lib/x86_64-linux-gnu/libx.so.1.2",
	} {
		got, err := resolveIn(root, in)
		if err != nil || got != want {
			t.Errorf("resolveIn(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := resolveIn(root, "/lib/nope"); err == nil {
		t.Error("missing file: want error")
	}
	must(os.Symlink("loop", filepath.Join(root, "loop")))
	if _, err := resolveIn(root, "/loop"); err == nil {
		t.Error("loop: want error")
	}
}

func TestElfDepsHost(t *testing.T) {
	// The host is a Debian-like system too: /bin/ls needs libc.
	if _, err := os.Stat("/lib/x86_64-linux-gnu/libc.so.6"); err != nil {
		t.Skip("not a Debian x86-64 multiarch host")
	}
	interp, needed, err := elfDeps("/", "/bin/ls")
	if err != nil {
		t.Fatal(err)
	}
	if interp != "/lib64/ld-linux-x86-64.so.2" {
		t.Errorf("interp %q", interp)
	}
	if !strings.Contains(strings.Join(needed, " "), "/libc.so.6") {
		t.Errorf("needed %q", needed)
	}
}

func TestStepper(t *testing.T) {
	var log bytes.Buffer
	s := &stepper{dir: t.TempDir(), log: &log}
	runs := 0
	step := func() error { runs++; return nil }
	if err := s.run("a", "k1", "step a", step); err != nil {
		t.Fatal(err)
	}
	first := s.stamp("a")
	if err := s.run("a", "k1", "step a", step); err != nil || runs != 1 {
		t.Fatalf("done step ran again (runs %d, err %v)", runs, err)
	}
	// A new key redoes the step, and its stamp changes (so later steps redo).
	if err := s.run("a", "k2", "step a", step); err != nil || runs != 2 || s.stamp("a") == first {
		t.Fatalf("changed key: runs %d, err %v", runs, err)
	}
	// A failed step leaves no stamp and is redone.
	if err := s.run("b", "k", "step b", func() error { return os.ErrInvalid }); err == nil || s.stamp("b") != "" {
		t.Fatalf("failed step: err %v, stamp %q", err, s.stamp("b"))
	}
	if !strings.Contains(log.String(), "hcaemu: provision: step a...\n") {
		t.Errorf("progress %q", log.String())
	}
}

func TestRemoveTreeRefusesMounts(t *testing.T) {
	if mp, ok := mountBelow("/"); !ok {
		t.Errorf("mountBelow(/) found nothing")
	} else if mp2, ok := mountBelow("/proc"); !ok || mp2 != "/proc" {
		t.Errorf("mountBelow(/proc) = %q, %v (first below /: %q)", mp2, ok, mp)
	}
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "f"), nil, 0o644)
	if err := removeTree(d); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d); !os.IsNotExist(err) {
		t.Fatal("not removed")
	}
}
