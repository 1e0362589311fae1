package ib

// SamplePackets is samplePackets for the external tests (tshark).
var SamplePackets = samplePackets
