package pvrdma

import "github.com/hcaemu/hcaemu/emu/hca"

// The core's vocabulary under the names this package has always exported
// (cmd/hcaemu, the tests), while the core moves into package hca.
type (
	FaultPoint      = hca.FaultPoint
	FaultEvent      = hca.FaultEvent
	FaultActionKind = hca.FaultActionKind
	FaultAction     = hca.FaultAction
	FaultHook       = hca.FaultHook
	StrictMode      = hca.StrictMode
	FindingKind     = hca.FindingKind
	Finding         = hca.Finding
	TraceEvent      = hca.TraceEvent
	Tracer          = hca.Tracer
	NAKCounts       = hca.NAKCounts
	QPStats         = hca.QPStats
	PortStats       = hca.PortStats
	CommandCount    = hca.CommandCount
	DeviceStats     = hca.DeviceStats
)

const (
	FaultAtCommand    = hca.FaultAtCommand
	FaultAtCompletion = hca.FaultAtCompletion
	FaultAtResponder  = hca.FaultAtResponder
	FaultAtDMA        = hca.FaultAtDMA

	FaultNone           = hca.FaultNone
	FaultFailCommand    = hca.FaultFailCommand
	FaultCompleteStatus = hca.FaultCompleteStatus
	FaultQPError        = hca.FaultQPError
	FaultCQError        = hca.FaultCQError
	FaultSRQError       = hca.FaultSRQError
	FaultSRQLimit       = hca.FaultSRQLimit
	FaultPortDown       = hca.FaultPortDown
	FaultGIDChange      = hca.FaultGIDChange
	FaultDeviceFatal    = hca.FaultDeviceFatal
	FaultFailDMA        = hca.FaultFailDMA
	FaultNAK            = hca.FaultNAK
	FaultRNRNAK         = hca.FaultRNRNAK
	FaultSuppressACK    = hca.FaultSuppressACK

	StrictWarn = hca.StrictWarn
	StrictOff  = hca.StrictOff
	StrictFail = hca.StrictFail

	FindingCommand   = hca.FindingCommand
	FindingHandle    = hca.FindingHandle
	FindingPageDir   = hca.FindingPageDir
	FindingQPState   = hca.FindingQPState
	FindingRingIndex = hca.FindingRingIndex
	FindingDoorbell  = hca.FindingDoorbell
	FindingWQE       = hca.FindingWQE
	FindingCQOverrun = hca.FindingCQOverrun
	FindingRegister  = hca.FindingRegister
	NumFindingKinds  = hca.NumFindingKinds
)

// WROpcodeNames: hca.WROpcodeNames.
var WROpcodeNames = hca.WROpcodeNames

// ParseStrictMode: hca.ParseStrictMode.
func ParseStrictMode(s string) (StrictMode, error) { return hca.ParseStrictMode(s) }
