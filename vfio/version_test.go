package vfio

import (
	"bytes"
	"encoding/json"
	"testing"
)

const qemuJSON = `{"capabilities": {"pgsizes": 4096, "max_msg_fds": 16, "max_dma_maps": 65535, "max_data_xfer_size": 1048576, "migration": {"max_bitmap_size": 268435456, "pgsize": 4096}, "write_multiple": true}}`

func versionPayload(major, minor uint16, text string) []byte {
	p := []byte{byte(major), byte(major >> 8), byte(minor), byte(minor >> 8)}
	return append(append(p, text...), 0)
}

func TestParseVersionQEMU(t *testing.T) {
	c, err := ParseVersion(versionPayload(0, 0, qemuJSON))
	if err != nil {
		t.Fatal(err)
	}
	want := ClientCaps{MaxMsgFDs: 16, MaxDataXferSize: 1 << 20, PgSizes: 4096, MaxDMAMaps: 65535, WriteMultiple: true}
	if c != want {
		t.Fatalf("caps %+v, want %+v", c, want)
	}
	// No JSON at all: protocol defaults.
	c, err = ParseVersion([]byte{0, 0, 0, 0})
	if err != nil || c.MaxMsgFDs != 1 || c.MaxDataXferSize != MaxDataXferSize {
		t.Fatalf("defaults %+v, %v", c, err)
	}
}

func TestVersionReplyForQEMU(t *testing.T) {
	r := versionReply(HeaderSize + len(versionPayload(0, 0, qemuJSON)))
	if HeaderSize+len(r) > 214 {
		t.Fatalf("reply of %d bytes exceeds QEMU's 214-byte buffer", HeaderSize+len(r))
	}
	want := `{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535}}`
	if got := string(r[4 : len(r)-1]); got != want || r[len(r)-1] != 0 || !bytes.Equal(r[:4], []byte{0, 0, 0, 0}) {
		t.Fatalf("reply %q", r)
	}
}

func FuzzVersionJSON(f *testing.F) {
	for _, s := range []string{
		qemuJSON,
		`{}`,
		`{"capabilities":{}}`,
		`{"capabilities":{"max_msg_fds":8,"max_data_xfer_size":1048576}}`,
		`{"capabilities":{"max_msg_fds":-1}}`,
		`{"capabilities":{"max_msg_fds":1e3}}`,
		`{"capabilities":{"max_msg_fds":18446744073709551616}}`,
		`{"capabilities":{"migration":{"pgsize":"x"}}}`,
		`{"capabilities":{"write_multiple":null}}`,
		`{"capabilities":[]}`,
		`{"capabilities": "ab`,
		`{"a":{"b":{"c":[1,2,{"d":null}]}}}`,
		"",
	} {
		f.Add(uint16(0), uint16(0), []byte(s), true)
	}
	f.Add(uint16(1), uint16(0), []byte(`{}`), true)
	f.Add(uint16(0), uint16(7), []byte(`{}`), false)
	f.Fuzz(func(t *testing.T, major, minor uint16, text []byte, nul bool) {
		p := []byte{byte(major), byte(major >> 8), byte(minor), byte(minor >> 8)}
		p = append(p, text...)
		if nul {
			p = append(p, 0)
		}
		c, err := ParseVersion(p)
		if err == nil {
			if c.Major != 0 || c.MaxMsgFDs > maxClientMsgFDs || c.MaxDataXferSize > maxClientXfer {
				t.Fatalf("accepted out-of-range caps %+v", c)
			}
			if len(p) > 4 {
				if p[len(p)-1] != 0 || !json.Valid(p[4:len(p)-1]) {
					t.Fatalf("accepted payload %q without valid NUL-terminated JSON", p)
				}
			}
		}
		// Whatever the request, the reply is NUL-terminated JSON and fits
		// whenever the smallest JSON fits.
		reqSize := HeaderSize + len(p)
		r := versionReply(reqSize)
		if len(r) < 5 || r[len(r)-1] != 0 || !json.Valid(r[4:len(r)-1]) {
			t.Fatalf("bad reply %q", r)
		}
		if reqSize >= HeaderSize+4+len("{}")+1 && HeaderSize+len(r) > reqSize {
			t.Fatalf("reply of %d bytes for a %d-byte request", HeaderSize+len(r), reqSize)
		}
	})
}
