package mlx5

import (
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hcaemu/hcaemu/emu/hca"

	"github.com/hcaemu/hcaemu/emu/mlx5/ifc"
	"github.com/hcaemu/hcaemu/emu/mlx5/mlx5test"
)

// irqs records the MSI-X vectors the device raises (Config.MSIX).
type irqs struct {
	mu sync.Mutex
	n  map[int]int
}

func (r *irqs) raise(v int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = make(map[int]int)
	}
	r.n[v]++
}

func (r *irqs) count(v int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[v]
}

// probeRAM is enough guest RAM for two probes: the fake driver never
// frees (the async EQ alone is 512 KiB).
const probeRAM = 4 << 20

// strictDevice is a device in hca.StrictFail mode whose first finding fails
// the test (the driver's good path makes none), with an MSI-X recorder.
func strictDevice(t *testing.T) (*Device, *mlx5test.Driver, *irqs) {
	t.Helper()
	r := &irqs{}
	d, drv := newDevice(t, Config{MSIX: r.raise, Strict: hca.StrictFail, OnFinding: func(f hca.Finding) {
		t.Errorf("finding on the driver's good path: %v", f)
	}}, probeRAM)
	return d, drv, r
}

// probed is a device with mlx5_core's probe done (hca.StrictWarn: the tests
// that use it make findings on purpose).
func probed(t *testing.T) (*Device, *mlx5test.Driver, *irqs) {
	t.Helper()
	r := &irqs{}
	d, drv := newDevice(t, Config{MSIX: r.raise}, probeRAM)
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
	return d, drv, r
}

// TestProbeUnload: mlx5_core's probe up to the end of mlx5_load and its
// unload, twice, against the device: what the driver learns, the EQs it
// creates, one CMD EQE and one interrupt per command in event mode,
// nothing the device should refuse.
func TestProbeUnload(t *testing.T) {
	d, drv, r := strictDevice(t)
	for round := range 2 {
		before := d.Stats()
		raised := r.count(0)
		if err := drv.Probe(); err != nil {
			t.Fatalf("probe %d: %v", round, err)
		}
		switch {
		case drv.ISSI != 1:
			t.Errorf("ISSI %d", drv.ISSI)
		case drv.BoardID != PSID:
			t.Errorf("board_id %q", drv.BoardID)
		case drv.UAR < FirstUAR:
			t.Errorf("UAR %d", drv.UAR)
		case drv.CmdEQ == nil || drv.CmdEQ.LogSize != 8 || drv.AsyncEQ == nil || drv.AsyncEQ.LogSize != 13:
			t.Errorf("EQs %+v %+v", drv.CmdEQ, drv.AsyncEQ)
		case drv.PagesEQ != nil:
			t.Error("a pages EQ with page_request_disable")
		case !drv.Events:
			t.Error("not in event mode")
		case d.DriverVersion() != mlx5test.DriverVersion:
			t.Errorf("driver version %q", d.DriverVersion())
		case ifc.CmdHCACapLogMaxQP.Get(drv.CapsCur) != 16 || ifc.AtomicCapsAtomicReq8BEndiannessMode.Get(drv.AtomicCur) != 1:
			t.Errorf("CUR caps: log_max_qp %d, atomic mode %d", ifc.CmdHCACapLogMaxQP.Get(drv.CapsCur), ifc.AtomicCapsAtomicReq8BEndiannessMode.Get(drv.AtomicCur))
		}
		// In event mode so far: the async EQ's CREATE_EQ only.
		if s := d.Stats(); s.CmdEQEs-before.CmdEQEs != 1 || r.count(0)-raised != 1 {
			t.Errorf("probe %d: %d CMD EQEs, %d interrupts; want 1 each", round, s.CmdEQEs-before.CmdEQEs, r.count(0)-raised)
		}
		// Health keeps ticking in event mode.
		if a, b := drv.Read32(ifc.InitSegHealthCounter), drv.Read32(ifc.InitSegHealthCounter); a == b {
			t.Error("health counter stuck")
		}
		before = d.Stats()
		if err := drv.Unload(); err != nil {
			t.Fatalf("unload %d: %v", round, err)
		}
		// The async EQ's DESTROY_EQ in event mode; the command EQ's and
		// everything after in polling mode.
		if s := d.Stats(); s.CmdEQEs-before.CmdEQEs != 1 {
			t.Errorf("unload %d: %d CMD EQEs, want 1", round, s.CmdEQEs-before.CmdEQEs)
		}
		d.core.Lock()
		state := d.fn.state
		d.core.Unlock()
		if state != stateDisabled {
			t.Errorf("state %d after DISABLE_HCA", state)
		}
	}
	if f := d.Findings(); f != [hca.NumFindingKinds]uint64{} {
		t.Errorf("findings %v", f)
	}
}

// TestEventMode: once the command EQ exists every completed command posts
// exactly one CMD EQE with its slot's bit, one doorbell's slots share one
// EQE, and an armed EQ raises its vector once until re-armed.
func TestEventMode(t *testing.T) {
	d, drv, r := strictDevice(t)
	for _, step := range []func() error{drv.FunctionEnable, drv.FunctionOpen, drv.InitOnce} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if s := d.Stats(); s.CmdEQEs != 0 || s.EQEs != 0 {
		t.Fatalf("EQEs before any EQ: %+v", s)
	}
	if err := drv.Load(); err != nil {
		t.Fatal(err)
	}
	// Exec checks each command's EQE (exactly its slot's bit, drained
	// within the budget) and re-arms the EQ: one interrupt each.
	base, raised := d.Stats().CmdEQEs, r.count(0)
	const n = 10
	for range n {
		if _, err := drv.Exec(mboxIn(ifc.OpQueryISSI, 0, 16), ifc.QueryISSIOutSize); err != nil {
			t.Fatal(err)
		}
	}
	// A failed command completes too.
	if _, err := drv.Exec(mboxIn(ifc.OpCreateTIS, 0, 16), 16); !isStatus(err, ifc.StatBadOpErr) {
		t.Fatalf("CREATE_TIS: %v", err)
	}
	if got := d.Stats().CmdEQEs - base; got != n+1 {
		t.Errorf("%d CMD EQEs for %d commands", got, n+1)
	}
	if got := r.count(0) - raised; got != n+1 {
		t.Errorf("%d interrupts for %d commands", got, n+1)
	}
	// Two slots rung by one doorbell: one EQE with both bits.
	for _, slot := range []int{1, 2} {
		lay := ifc.CmdLayout{Type: ifc.PCICmdXport, InLen: 16, OutLen: 16, Token: drv.Token(), StatusOwn: ifc.CmdOwnerHW}
		ifc.MboxInOpcode.Set(lay.In[:], uint32(ifc.OpQueryPages))
		ifc.MboxInOpMod.Set(lay.In[:], ifc.PostInitPages)
		lay.Encode(drv.Bytes(drv.Slot(slot), ifc.CmdLayoutSize))
	}
	drv.Write32(ifc.InitSegCmdDbell, 0b110)
	eqe := drv.NextEQE(drv.CmdEQ)
	if eqe == nil || eqe[ifc.EQEType] != ifc.EventCmd || be32(eqe[ifc.EQEData:]) != 0b110 || drv.NextEQE(drv.CmdEQ) != nil {
		t.Errorf("one doorbell, two slots: EQE % x", eqe)
	}
	drv.UpdateCI(drv.CmdEQ, true)
}

var be = binary.BigEndian

func be32(b []byte) uint32 { return be.Uint32(b) }

func isStatus(err error, st ifc.Status) bool {
	var ce *mlx5test.CmdError
	return errors.As(err, &ce) && ce.Status == st
}

// TestEQOverrunAndWrap: commands whose EQEs the driver does not consume
// fill the command EQ; the one beyond its size is dropped (spec §3.4:
// never more than size unconsumed EQEs), counted and reported; the
// interrupt comes once until the EQ is armed again, at once if EQEs are
// pending; after the driver consumes, EQEs continue on the second pass
// with the owner bit flipped.
func TestEQOverrunAndWrap(t *testing.T) {
	d, drv, r := probed(t)
	e := drv.CmdEQ
	ci0 := e.CI // the async EQ's CREATE_EQ was consumed
	raised := r.count(0)
	post := func() {
		lay := ifc.CmdLayout{Type: ifc.PCICmdXport, InLen: 16, OutLen: 16, Token: drv.Token()}
		ifc.MboxInOpcode.Set(lay.In[:], uint32(ifc.OpQueryPages))
		ifc.MboxInOpMod.Set(lay.In[:], ifc.PostInitPages)
		if got := drv.Post(0, lay); got.StatusOwn != 0 {
			t.Fatalf("status_own %#x", got.StatusOwn)
		}
	}
	for range e.Size() + 1 {
		post()
	}
	s := d.Stats()
	if s.EQOverruns != 1 || d.Findings()[hca.FindingCQOverrun] != 1 {
		t.Errorf("overruns %d, findings %v", s.EQOverruns, d.Findings())
	}
	if got := r.count(0) - raised; got != 1 {
		t.Errorf("%d interrupts while the EQ was not re-armed", got)
	}
	// Consume half, arm: EQEs are pending, so the vector is raised at once.
	for range e.Size() / 2 {
		if drv.NextEQE(e) == nil {
			t.Fatal("EQE missing")
		}
	}
	drv.UpdateCI(e, true)
	if got := r.count(0) - raised; got != 2 {
		t.Errorf("arming with pending EQEs: %d interrupts", got)
	}
	for drv.NextEQE(e) != nil {
	}
	if e.CI-ci0 != e.Size() {
		t.Fatalf("consumed %d EQEs of %d", e.CI-ci0, e.Size())
	}
	drv.UpdateCI(e, true)
	post() // the second pass: owner bit 1
	eqe := drv.EQE(e, e.CI)
	if eqe[ifc.EQEOwner] != 1 || drv.NextEQE(e) == nil {
		t.Errorf("second pass EQE % x", eqe)
	}
	drv.UpdateCI(e, true)
	// A consumer index beyond the producer is ignored and reported.
	drv.Write32(uint64(drv.UAR)<<12+ifc.UAREQDoorbellArm, uint32(e.EQN)<<24|(e.CI+5))
	if d.Findings()[hca.FindingRingIndex] != 1 {
		t.Errorf("findings %v", d.Findings())
	}
	// Doorbells for an EQ that does not exist, and through a UAR page
	// nobody allocated, are ignored and reported.
	drv.Write32(uint64(drv.UAR)<<12+ifc.UAREQDoorbellArm, 31<<24)
	drv.Write32(uint64(drv.UAR+1)<<12+ifc.UAREQDoorbellArm, uint32(e.EQN)<<24)
	if d.Findings()[hca.FindingDoorbell] != 2 {
		t.Errorf("findings %v", d.Findings())
	}
	// The driver's own path still works.
	if _, err := drv.Exec(mboxIn(ifc.OpQueryISSI, 0, 16), ifc.QueryISSIOutSize); err != nil {
		t.Fatal(err)
	}
}

// TestCapsQuery: MAX and CUR before and after SET_HCA_CAP, the caps the
// spec requires on and off.
func TestCapsQuery(t *testing.T) {
	_, drv, _ := probed(t)
	maxCaps, cur := drv.CapsMax, drv.CapsCur
	on := map[string]struct {
		f ifc.Field
		v uint32
	}{
		"xrc": {ifc.CmdHCACapXRC, 1}, "page_request_disable": {ifc.CmdHCACapPageRequestDisable, 1},
		"log_max_eq": {ifc.CmdHCACapLogMaxEQ, 5}, "cqe_version": {ifc.CmdHCACapCQEVersion, 1},
		"log_bf_reg_size": {ifc.CmdHCACapLogBFRegSize, 9}, "umr_modify_entity_size_disabled": {ifc.CmdHCACapUMRModifyEntitySizeDisabled, 0},
		"num_ports": {ifc.CmdHCACapNumPorts, 1}, "atomic": {ifc.CmdHCACapAtomic, 1},
		"port_type": {ifc.CmdHCACapPortType, 0}, "bf": {ifc.CmdHCACapBF, 0}, "roce": {ifc.CmdHCACapRoCE, 0},
		"dct": {ifc.CmdHCACapDCT, 0}, "hca_cap_2": {ifc.CmdHCACapHCACap2, 0}, "log_max_uctx": {ifc.CmdHCACapLogMaxUctx, 0},
		"device_frequency_khz": {ifc.CmdHCACapDeviceFrequencyKHz, DeviceFrequencyKHz}, "max_num_eqs": {ifc.CmdHCACapMaxNumEQs, 0},
	}
	for name, c := range on {
		if got := c.f.Get(maxCaps); got != c.v {
			t.Errorf("MAX %s = %d, want %d", name, got, c.v)
		}
		if name != "log_max_qp" && c.f.Get(cur) != c.f.Get(maxCaps) {
			t.Errorf("CUR %s = %d, MAX %d", name, c.f.Get(cur), c.f.Get(maxCaps))
		}
	}
	if ifc.CmdHCACapLogMaxQP.Get(maxCaps) != 16 || ifc.CmdHCACapLogMaxQP.Get(cur) != 16 {
		t.Error("log_max_qp")
	}
	if ifc.AtomicCapsAtomicOperations.Get(drv.AtomicMax) != 3 || ifc.AtomicCapsAtomicReq8BEndiannessMode.Get(drv.AtomicMax) != 0 ||
		ifc.AtomicCapsAtomicReq8BEndiannessMode.Get(drv.AtomicCur) != 1 {
		t.Error("atomic caps")
	}
}

// TestCommandValidation: each command refuses what hardware refuses, with
// its status and syndrome, records a finding naming the field, and
// changes nothing.
func TestCommandValidation(t *testing.T) {
	type cmdCase struct {
		name  string
		stage string // "enabled": after ENABLE_HCA only; else after the probe
		in    func(drv *mlx5test.Driver) []byte
		out   uint32
		st    ifc.Status
		synd  uint32
		text  string // in the finding
	}
	eqIn := func(drv *mlx5test.Driver, edit func(in, eqc []byte)) []byte {
		page := drv.Alloc(4096, 4096)
		in := make([]byte, ifc.CreateEQInSize+8*4)
		ifc.MboxInOpcode.Set(in, uint32(ifc.OpCreateEQ))
		eqc := ifc.CreateEQInEQContextEntry.Bytes(in)
		ifc.EQCLogEQSize.Set(eqc, 6) // 64 EQEs: one page
		ifc.EQCUARPage.Set(eqc, drv.UAR)
		be.PutUint64(in[ifc.CreateEQInPAS:], page)
		edit(in, eqc)
		return in
	}
	cases := []cmdCase{
		{"uid", "", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpQueryISSI, 0, 16)
			ifc.MboxInUID.Set(in, 5)
			return in
		}, 0x70, ifc.StatBadParamErr, SyndUID, "mbox_in.uid=0x5"},
		{"short input", "", func(*mlx5test.Driver) []byte { return mboxIn(ifc.OpCreateEQ, 0, 0x20) }, 16, ifc.StatBadInpLenErr, SyndInLen, "inlen=32 < sizeof create_eq_in=272"},
		{"short output", "", func(*mlx5test.Driver) []byte { return mboxIn(ifc.OpQueryHCACap, 1, 16) }, 0x110, ifc.StatBadOutpLenErr, SyndOutLen, "outlen=272 < sizeof query_hca_cap_out=4112"},
		{"enable other function", "", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpEnableHCA, 0, 16)
			ifc.EnableHCAInFunctionID.Set(in, 1)
			return in
		}, 16, ifc.StatBadParamErr, SyndFunctionID, "enable_hca_in.embedded_cpu_function=0 function_id=1"},
		{"query_pages op_mod", "", func(*mlx5test.Driver) []byte { return mboxIn(ifc.OpQueryPages, 0, 16) }, 16, ifc.StatBadParamErr, SyndPagesOpMod, "query_pages_in.op_mod=0"},
		{"query_hca_cap ODP", "", func(*mlx5test.Driver) []byte { return mboxIn(ifc.OpQueryHCACap, 0x2<<1|1, 16) }, 0x1010, ifc.StatBadParamErr, SyndCapType, "query_hca_cap_in.op_mod=0x5"},
		{"query_hca_cap other function", "", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpQueryHCACap, 1, 16)
			ifc.QueryHCACapInOtherFunction.Set(in, 1)
			return in
		}, 0x1010, ifc.StatBadParamErr, SyndFunctionID, "query_hca_cap_in.other_function=1"},
		{"set_hca_cap after INIT_HCA", "", func(*mlx5test.Driver) []byte { return mboxIn(ifc.OpSetHCACap, 0, 0x1010) }, 16, ifc.StatBadSysStateErr, SyndInitialized, "after INIT_HCA"},
		{"set_hca_cap mode bit", "enabled", func(*mlx5test.Driver) []byte { return mboxIn(ifc.OpSetHCACap, 1, 0x1010) }, 16, ifc.StatBadParamErr, SyndCapOpMod, "set_hca_cap_in.op_mod=0x1"},
		{"set_hca_cap log_max_qp", "enabled", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpSetHCACap, 0, 0x1010)
			ifc.CmdHCACapLogMaxQP.Set(in[0x10:], 17)
			return in
		}, 16, ifc.StatBadParamErr, SyndCapField, "set_hca_cap_in.capability.cmd_hca_cap.log_max_qp=17 > max 16"},
		{"set_hca_cap roce", "enabled", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpSetHCACap, 0, 0x1010)
			ifc.CmdHCACapRoCE.Set(in[0x10:], 1)
			return in
		}, 16, ifc.StatBadParamErr, SyndCapField, "cmd_hca_cap.roce=1 > max 0"},
		{"set_hca_cap atomic mode 2", "enabled", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpSetHCACap, ifc.CapAtomic<<1, 0x1010)
			ifc.AtomicCapsAtomicReq8BEndiannessMode.Set(in[0x10:], 2)
			return in
		}, 16, ifc.StatBadParamErr, SyndCapField, "atomic_caps.atomic_req_8B_endianness_mode=2"},
		{"set_issi 2", "enabled", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpSetISSI, 0, 16)
			ifc.SetISSIInCurrentISSI.Set(in, 2)
			return in
		}, 16, ifc.StatBadParamErr, SyndISSI, "set_issi_in.current_issi=2"},
		{"alloc_uar before INIT_HCA", "enabled", func(*mlx5test.Driver) []byte { return mboxIn(ifc.OpAllocUAR, 0, 16) }, 16, ifc.StatBadSysStateErr, SyndNotInitialized, "before INIT_HCA"},
		{"init_hca twice", "", func(*mlx5test.Driver) []byte { return mboxIn(ifc.OpInitHCA, 0, 16) }, 16, ifc.StatBadSysStateErr, SyndInitialized, "INIT_HCA twice"},
		{"teardown force", "", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpTeardownHCA, 0, 16)
			ifc.TeardownHCAInProfile.Set(in, ifc.TeardownForceClose)
			return in
		}, 16, ifc.StatBadParamErr, SyndTeardownProfile, "teardown_hca_in.profile=1"},
		{"access_reg PTYS", "", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpAccessReg, ifc.RegRead, 0x10+0x40)
			ifc.AccessRegisterInRegisterID.Set(in, ifc.RegPTYS)
			return in
		}, 0x50, ifc.StatBadParamErr, SyndRegister, "access_register_in.register_id=0x5004"},
		{"access_reg op_mod", "", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpAccessReg, 2, 0x10+0x14)
			ifc.AccessRegisterInRegisterID.Set(in, ifc.RegPCAP)
			return in
		}, 0x24, ifc.StatBadParamErr, SyndRegOpMod, "access_register_in.op_mod=2"},
		{"access_reg PCAP port 2", "", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpAccessReg, ifc.RegWrite, 0x10+0x14)
			ifc.AccessRegisterInRegisterID.Set(in, ifc.RegPCAP)
			ifc.PCAPRegLocalPort.Set(in[0x10:], 2)
			return in
		}, 0x24, ifc.StatBadParamErr, SyndRegField, "pcap_reg.local_port=2"},
		{"access_reg PCAP short", "", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpAccessReg, ifc.RegWrite, 0x10+4)
			ifc.AccessRegisterInRegisterID.Set(in, ifc.RegPCAP)
			return in
		}, 0x14, ifc.StatBadInpLenErr, SyndRegLen, "PCAP write"},
		{"dealloc_uar foreign", "", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpDeallocUAR, 0, 16)
			ifc.DeallocUARInUAR.Set(in, 1) // an init segment page
			return in
		}, 16, ifc.StatBadResErr, SyndUARUnknown, "dealloc_uar_in.uar=1"},
		{"dealloc_uar unknown", "", func(drv *mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpDeallocUAR, 0, 16)
			ifc.DeallocUARInUAR.Set(in, drv.UAR+1)
			return in
		}, 16, ifc.StatBadResErr, SyndUARUnknown, "not a UAR ALLOC_UAR handed out"},
		{"dealloc_uar busy", "", func(drv *mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpDeallocUAR, 0, 16)
			ifc.DeallocUARInUAR.Set(in, drv.UAR)
			return in
		}, 16, ifc.StatResBusy, SyndUARBusy, "still rings through it"},
		{"destroy_eq unknown", "", func(*mlx5test.Driver) []byte {
			in := mboxIn(ifc.OpDestroyEQ, 0, 16)
			ifc.DestroyEQInEQNumber.Set(in, 30)
			return in
		}, 16, ifc.StatBadResErr, SyndEQUnknown, "destroy_eq_in.eq_number=30"},
		{"create_eq log_eq_size", "", func(drv *mlx5test.Driver) []byte {
			return eqIn(drv, func(_, eqc []byte) { ifc.EQCLogEQSize.Set(eqc, 30) })
		}, 16, ifc.StatBadParamErr, SyndEQSize, "create_eq_in.eq_context_entry.log_eq_size=30 > log_max_eq_sz=15"},
		{"create_eq PAS outside guest memory", "", func(drv *mlx5test.Driver) []byte {
			return eqIn(drv, func(in, _ []byte) { be.PutUint64(in[ifc.CreateEQInPAS:], 1<<40) })
		}, 16, ifc.StatBadParamErr, SyndEQPAS, "create_eq_in.pas[0]=0x10000000000"},
		{"create_eq PAS wraps", "", func(drv *mlx5test.Driver) []byte {
			return eqIn(drv, func(in, _ []byte) { be.PutUint64(in[ifc.CreateEQInPAS:], ^uint64(0xfff)) })
		}, 16, ifc.StatBadParamErr, SyndEQPAS, "create_eq_in.pas[0]"},
		{"create_eq PAS misaligned", "", func(drv *mlx5test.Driver) []byte {
			return eqIn(drv, func(in, _ []byte) { be.PutUint64(in[ifc.CreateEQInPAS:], ramBase+0x800) })
		}, 16, ifc.StatBadParamErr, SyndEQPAS, "not aligned"},
		{"create_eq short PAS", "", func(drv *mlx5test.Driver) []byte {
			return eqIn(drv, func(_, eqc []byte) { ifc.EQCLogEQSize.Set(eqc, 10) })
		}, 16, ifc.StatBadInpLenErr, SyndEQPASLen, "create_eq_in: inlen=304 < 400"},
		{"create_eq uar", "", func(drv *mlx5test.Driver) []byte {
			return eqIn(drv, func(_, eqc []byte) { ifc.EQCUARPage.Set(eqc, 2) })
		}, 16, ifc.StatBadParamErr, SyndEQUAR, "create_eq_in.eq_context_entry.uar_page=2"},
		{"create_eq intr", "", func(drv *mlx5test.Driver) []byte {
			return eqIn(drv, func(_, eqc []byte) { ifc.EQCIntr.Set(eqc, DefaultVectors) })
		}, 16, ifc.StatBadParamErr, SyndEQIntr, "create_eq_in.eq_context_entry.intr=17 >= 17"},
		{"create_eq log_page_size", "", func(drv *mlx5test.Driver) []byte {
			return eqIn(drv, func(_, eqc []byte) { ifc.EQCLogPageSize.Set(eqc, 19) })
		}, 16, ifc.StatBadParamErr, SyndEQPageSize, "log_page_size=19"},
		{"create_eq second command EQ", "", func(drv *mlx5test.Driver) []byte {
			return eqIn(drv, func(in, _ []byte) { ifc.CreateEQInEventBitmask(0).Set64(in, 1<<ifc.EventCmd) })
		}, 16, ifc.StatBadParamErr, SyndEQCmd, "already takes command completions"},
		{"create_eq ec", "", func(drv *mlx5test.Driver) []byte {
			return eqIn(drv, func(_, eqc []byte) { ifc.EQCEC.Set(eqc, 1) })
		}, 16, ifc.StatBadParamErr, SyndEQContext, "eq_context_entry.ec=1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []hca.Finding
			r := &irqs{}
			d, drv := newDevice(t, Config{MSIX: r.raise, OnFinding: func(f hca.Finding) { got = append(got, f) }, Strict: hca.StrictFail}, probeRAM)
			var err error
			if c.stage == "enabled" {
				if err = drv.FunctionEnable(); err == nil {
					_, err = drv.Exec(mboxIn(ifc.OpEnableHCA, 0, 16), 16)
				}
			} else {
				err = drv.Probe()
			}
			if err != nil {
				t.Fatal(err)
			}
			d.core.Lock()
			eqs, uars := len(d.fn.eqs), len(d.fn.uars)
			d.core.Unlock()
			out, err := drv.Exec(c.in(drv), c.out)
			var ce *mlx5test.CmdError
			if !errors.As(err, &ce) || ce.Status != c.st || ce.Syndrome != c.synd {
				t.Fatalf("%v, want status %v syndrome %#x", err, c.st, c.synd)
			}
			if !allZero(out[8:]) {
				t.Errorf("failed command's output beyond its header: % x", out[:min(len(out), 32)])
			}
			if len(got) != 1 || !strings.Contains(got[0].Text, c.text) {
				t.Fatalf("findings %v, want one naming %q", got, c.text)
			}
			d.core.Lock()
			if len(d.fn.eqs) != eqs || len(d.fn.uars) != uars {
				t.Errorf("objects changed: %d EQs %d UARs, were %d %d", len(d.fn.eqs), len(d.fn.uars), eqs, uars)
			}
			d.core.Unlock()
			// hca.StrictFail latched the device: the next command is an
			// internal error, and the health buffer shows it.
			if _, err := drv.Exec(mboxIn(ifc.OpQueryISSI, 0, 16), 0x70); !isStatus(err, ifc.StatIntErr) {
				t.Errorf("after the latch: %v", err)
			}
			if drv.Read32(ifc.HealthIriscIndex)>>16&0xff == 0 {
				t.Error("health syndrome clear after the latch")
			}
		})
	}
}

// TestDestroyEQTwice and TestRegisters: objects and registers over their
// lives.
func TestDestroyEQTwice(t *testing.T) {
	d, drv, _ := probed(t)
	e, err := drv.CreateEQ(1024, [4]uint64{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if e.EQN != 2 || e.LogSize != 11 {
		t.Errorf("completion EQ %d log %d", e.EQN, e.LogSize)
	}
	if err := drv.DestroyEQ(e); err != nil {
		t.Fatal(err)
	}
	if err := drv.DestroyEQ(e); !isStatus(err, ifc.StatBadResErr) {
		t.Fatalf("second DESTROY_EQ: %v", err)
	}
	if d.Findings()[hca.FindingHandle] != 1 {
		t.Errorf("findings %v", d.Findings())
	}
	// The number is handed out again.
	if e2, err := drv.CreateEQ(1024, [4]uint64{}, 3); err != nil || e2.EQN != e.EQN {
		t.Errorf("re-created EQ %+v: %v", e2, err)
	}
}

func TestRegisters(t *testing.T) {
	_, drv, _ := probed(t)
	pcap := make([]byte, ifc.PCAPRegSize)
	ifc.PCAPRegLocalPort.Set(pcap, 1)
	ifc.PCAPRegPortCapabilityMask.Set(pcap, 1<<16)
	if out, err := drv.AccessReg(ifc.RegPCAP, 0, pcap, true); err != nil || ifc.PCAPRegPortCapabilityMask.Get(out) != 1<<16 {
		t.Fatalf("PCAP write: %v % x", err, out)
	}
	out, err := drv.AccessReg(ifc.RegPCAP, 0, make([]byte, ifc.PCAPRegSize), false)
	if err != nil || ifc.PCAPRegPortCapabilityMask.Get(out) != 1<<16 || ifc.PCAPRegLocalPort.Get(out) != 1 {
		t.Fatalf("PCAP read: %v % x", err, out)
	}
	desc := make([]byte, ifc.NodeDescRegSize)
	copy(desc, "hcaemu mlx5_0")
	if _, err := drv.AccessReg(ifc.RegNodeDesc, 0, desc, true); err != nil {
		t.Fatal(err)
	}
	if out, err := drv.AccessReg(ifc.RegNodeDesc, 0, make([]byte, ifc.NodeDescRegSize), false); err != nil || string(out[:13]) != "hcaemu mlx5_0" {
		t.Fatalf("NODE_DESC read: %v %q", err, out)
	}
}

// TestResetForgets: a vfio-user reset forgets the function: the next probe
// starts over, and an EQ doorbell of the old life is a finding.
func TestResetForgets(t *testing.T) {
	d, drv, _ := probed(t)
	uar, eqn := drv.UAR, drv.CmdEQ.EQN
	d.Reset()
	drv = mlx5test.New(d, drv.Mem) // pci_enable_device again
	drv.Write32(uint64(uar)<<12+ifc.UAREQDoorbellArm, uint32(eqn)<<24)
	if d.Findings()[hca.FindingDoorbell] != 1 {
		t.Errorf("findings %v", d.Findings())
	}
	if err := drv.Probe(); err != nil {
		t.Fatal(err)
	}
}

// TestSetCapsCur: SET_HCA_CAP's writable fields show in CUR, never in MAX;
// a second SET replaces them; TEARDOWN_HCA allows another SET before the
// next INIT_HCA, and DISABLE_HCA forgets them.
func TestSetCapsCur(t *testing.T) {
	_, drv, _ := strictDevice(t)
	if err := drv.FunctionEnable(); err != nil {
		t.Fatal(err)
	}
	set := func(logMaxQP uint32) {
		t.Helper()
		block := make([]byte, ifc.HCACapSize)
		ifc.CmdHCACapLogMaxQP.Set(block, logMaxQP)
		if err := drv.SetCaps(ifc.CapGeneral, block); err != nil {
			t.Fatal(err)
		}
	}
	check := func(wantCur uint32) {
		t.Helper()
		cur, err := drv.QueryCaps(ifc.CapGeneral, ifc.CapModeCur)
		if err != nil {
			t.Fatal(err)
		}
		maxCaps, err := drv.QueryCaps(ifc.CapGeneral, ifc.CapModeMax)
		if err != nil {
			t.Fatal(err)
		}
		if got := ifc.CmdHCACapLogMaxQP.Get(cur); got != wantCur {
			t.Errorf("CUR log_max_qp %d, want %d", got, wantCur)
		}
		if got := ifc.CmdHCACapLogMaxQP.Get(maxCaps); got != 16 {
			t.Errorf("MAX log_max_qp %d", got)
		}
	}
	check(16)
	set(10)
	check(10)
	set(12)
	check(12)
	if _, err := drv.Exec(mboxIn(ifc.OpInitHCA, 0, 16), 16); err != nil {
		t.Fatal(err)
	}
	if _, err := drv.Exec(mboxIn(ifc.OpTeardownHCA, 0, 16), 16); err != nil {
		t.Fatal(err)
	}
	check(12)
	set(8)
	check(8)
	if _, err := drv.Exec(mboxIn(ifc.OpDisableHCA, 0, 16), 16); err != nil {
		t.Fatal(err)
	}
	if _, err := drv.Exec(mboxIn(ifc.OpEnableHCA, 0, 16), 16); err != nil {
		t.Fatal(err)
	}
	check(16)
}
