package vfio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// ClientCaps are the capabilities a client offers in its VERSION request,
// with the protocol defaults filled in for keys it leaves out.
type ClientCaps struct {
	Major, Minor    uint16
	MaxMsgFDs       uint64 // fds the client accepts per message
	MaxDataXferSize uint64 // largest data transfer the client accepts
	PgSizes         uint64
	MaxDMAMaps      uint64
	WriteMultiple   bool
}

// Limits on what a client may claim (libvfio-user's bounds; QEMU's are
// tighter).
const (
	maxClientMsgFDs = 1024
	maxClientXfer   = 1 << 40
)

var errVersion = errors.New("malformed VERSION")

// ParseVersion decodes a VERSION request payload: major and minor, then
// optionally NUL-terminated JSON {"capabilities": {...}}. It rejects anything
// a well-behaved client would not send, since the connection is closed after
// a failed VERSION anyway.
func ParseVersion(p []byte) (ClientCaps, error) {
	c := ClientCaps{MaxMsgFDs: 1, MaxDataXferSize: MaxDataXferSize, PgSizes: 4096, MaxDMAMaps: 65535}
	if len(p) < versionMinSize {
		return c, fmt.Errorf("%w: payload of %d bytes, want at least %d", errVersion, len(p), versionMinSize)
	}
	c.Major, c.Minor = le.Uint16(p[0:]), le.Uint16(p[2:])
	if c.Major != 0 {
		return c, fmt.Errorf("%w: major version %d, only 0 is supported", errVersion, c.Major)
	}
	text := p[versionMinSize:]
	if len(text) == 0 {
		return c, nil
	}
	if text[len(text)-1] != 0 {
		return c, fmt.Errorf("%w: JSON is not NUL-terminated", errVersion)
	}
	text = text[:len(text)-1]
	if bytes.IndexByte(text, 0) >= 0 {
		return c, fmt.Errorf("%w: NUL inside the JSON", errVersion)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(text, &top); err != nil || top == nil {
		return c, fmt.Errorf("%w: JSON is not an object: %v", errVersion, err)
	}
	raw, ok := top["capabilities"]
	if !ok {
		return c, nil
	}
	var caps map[string]json.RawMessage
	if err := json.Unmarshal(raw, &caps); err != nil || caps == nil {
		return c, fmt.Errorf("%w: \"capabilities\" is not an object", errVersion)
	}
	uintCap := func(key string, dst *uint64, max uint64) error {
		v, ok := caps[key]
		if !ok {
			return nil
		}
		n, err := jsonUint(v)
		if err != nil || n > max {
			return fmt.Errorf("%w: capability %q = %s: want an integer in [0, %d]", errVersion, key, v, max)
		}
		*dst = n
		return nil
	}
	if err := errors.Join(
		uintCap("max_msg_fds", &c.MaxMsgFDs, maxClientMsgFDs),
		uintCap("max_data_xfer_size", &c.MaxDataXferSize, maxClientXfer),
		uintCap("pgsizes", &c.PgSizes, math.MaxUint64),
		uintCap("max_dma_maps", &c.MaxDMAMaps, math.MaxUint64),
	); err != nil {
		return c, err
	}
	if v, ok := caps["write_multiple"]; ok {
		if err := json.Unmarshal(v, &c.WriteMultiple); err != nil || isNull(v) {
			return c, fmt.Errorf("%w: capability \"write_multiple\" = %s: want a boolean", errVersion, v)
		}
	}
	if v, ok := caps["migration"]; ok {
		var mig map[string]json.RawMessage
		if err := json.Unmarshal(v, &mig); err != nil || mig == nil {
			return c, fmt.Errorf("%w: capability \"migration\" is not an object", errVersion)
		}
		for _, key := range []string{"pgsize", "max_bitmap_size"} {
			if v, ok := mig[key]; ok {
				if _, err := jsonUint(v); err != nil {
					return c, fmt.Errorf("%w: migration %q = %s: want an integer", errVersion, key, v)
				}
			}
		}
	}
	return c, nil
}

// jsonUint decodes a plain non-negative JSON integer.
func jsonUint(v json.RawMessage) (uint64, error) {
	if isNull(v) {
		return 0, errors.New("null")
	}
	var n uint64
	d := json.NewDecoder(bytes.NewReader(v))
	if err := d.Decode(&n); err != nil {
		return 0, err
	}
	return n, nil
}

// versionReplyJSON lists the server's VERSION JSON, most complete first. The
// reply must not be larger than the request (QEMU receives it into the
// request's buffer), so the server sends the first that fits; every key it
// may drop has a default equal to the server's value, except max_msg_fds
// whose default only makes the client send fewer fds than allowed.
// write_multiple is never offered: REGION_WRITE_MULTI is not implemented.
var versionReplyJSON = []string{
	fmt.Sprintf(`{"capabilities":{"max_msg_fds":%d,"max_data_xfer_size":%d,"pgsizes":4096,"max_dma_maps":65535}}`, MaxMsgFDs, MaxDataXferSize),
	fmt.Sprintf(`{"capabilities":{"max_msg_fds":%d,"max_data_xfer_size":%d}}`, MaxMsgFDs, MaxDataXferSize),
	fmt.Sprintf(`{"capabilities":{"max_msg_fds":%d}}`, MaxMsgFDs),
	`{}`,
}

// versionReply builds the VERSION reply payload for a request of reqSize
// bytes (header included).
func versionReply(reqSize int) []byte {
	var text string
	for _, text = range versionReplyJSON {
		if HeaderSize+versionMinSize+len(text)+1 <= reqSize {
			break
		}
	}
	p := make([]byte, versionMinSize+len(text)+1) // major 0, minor 0
	copy(p[versionMinSize:], text)
	return p
}

func isNull(v json.RawMessage) bool {
	return string(bytes.TrimSpace(v)) == "null"
}
