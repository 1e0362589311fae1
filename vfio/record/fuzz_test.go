package record

import (
	"bytes"
	"compress/gzip"
	"reflect"
	"strings"
	"testing"
)

// gzipped compresses the text of a recording file.
func gzipped(t testing.TB, text []byte) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(text); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// FuzzRead feeds Read recording files (the JSON lines, compressed here so
// that the fuzzer works on the text). Oracle: Read never panics and fails
// with a one-line error; a recording it accepts has a header a replay can
// use (an Ethernet link without an IB port, or an InfiniBand link with a
// unicast LID that is not the SM's and a GUID), and written again and read
// back it is the same recording.
func FuzzRead(f *testing.F) {
	for _, seed := range []string{
		`{"hcaemu_record":1,"name":"hca0","mac":"00:50:56:ca:00:00"}` + "\n" + `{"k":"rr","r":1,"n":4,"d":"AQIDBA=="}` + "\n" + `{"k":"irq","v":3}` + "\n",
		`{"hcaemu_record":1,"name":"hca1","link":"infiniband","ib":{"lid":2,"port_guid":12345,"gid_prefix":18338657682652659712}}` + "\n" + `{"k":"tx","d":"AAAA"}` + "\n" + `{"k":"rx","d":"AAAA","x":true}` + "\n",
		`{"hcaemu_record":1,"name":"x","link":"infiniband"}` + "\n",
		`{"hcaemu_record":1,"name":"x","link":"ethernet","ib":{"lid":2,"port_guid":2}}` + "\n",
		`{"hcaemu_record":1,"name":"x","link":"token ring"}` + "\n",
		`{"hcaemu_record":1,"name":"x","link":"infiniband","ib":{"lid":49152,"port_guid":9}}` + "\n",
		`{"hcaemu_record":1,"name":"x"}` + "\n" + `{"k":"tx","d":""}` + "\n" + `{"k":"addrs","ip":[]}` + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		rec, err := Read(bytes.NewReader(gzipped(t, text)))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("a multi-line error: %q", err)
			}
			return
		}
		switch rec.Link {
		case "", LinkEthernet:
			if rec.IB != nil {
				t.Fatalf("accepted an IB port on link %q", rec.Link)
			}
		case LinkInfiniBand:
			if rec.IB == nil || rec.IB.LID < 2 || rec.IB.LID >= 0xC000 || rec.IB.PortGUID < 2 {
				t.Fatalf("accepted an InfiniBand link with port %+v", rec.IB)
			}
		default:
			t.Fatalf("accepted link %q", rec.Link)
		}
		var b bytes.Buffer
		if err := rec.Write(&b); err != nil {
			t.Fatalf("writing back: %v", err)
		}
		again, err := Read(&b)
		if err != nil {
			t.Fatalf("reading back what Write wrote: %v", err)
		}
		rec.Format = FormatVersion
		normalize(rec)
		if !reflect.DeepEqual(rec, again) {
			t.Fatalf("round trip changed the recording:\n%+v\n%+v", rec, again)
		}
	})
}

// normalize makes empty data and address lists nil, as a recording file
// writes them (omitted).
func normalize(rec *Recording) {
	for i := range rec.Events {
		ev := &rec.Events[i]
		if len(ev.Data) == 0 {
			ev.Data = nil
		}
		if len(ev.Addrs) == 0 {
			ev.Addrs = nil
		}
	}
}
