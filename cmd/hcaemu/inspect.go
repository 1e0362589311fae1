package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/hcaemu/hcaemu/emu/fault"
)

// inspectWhat are the object kinds "hcaemu inspect" shows (eqs: mlx5's
// event queues).
var inspectWhat = []string{"devices", "ports", "gids", "pds", "mrs", "cqs", "qps", "srqs", "eqs", "stats"}

// sectionKeys are the JSON keys of the sections in a device's answer.
var sectionKeys = map[string]string{"devices": "Devices", "ports": "Ports", "gids": "GIDs", "pds": "PDs",
	"mrs": "MRs", "cqs": "CQs", "qps": "QPs", "srqs": "SRQs", "eqs": "EQs", "stats": "Stats"}

// inspected is one device's answer to inspect, as the client reads it:
// its name and model and the section asked for as inspect prints it (the
// JSON answer also has the section itself, under its sectionKeys key).
type inspected struct {
	Device string
	Model  string
	Text   string
}

// inspect is the control socket's inspector: what the live devices hold,
// whatever their model (hca.Observed).
func (h *hcas) inspect(what string) (any, error) {
	if what == "" {
		what = "devices"
	}
	if !slices.Contains(inspectWhat, what) {
		return nil, fmt.Errorf("unknown %q: want %s", what, strings.Join(inspectWhat, ", "))
	}
	out := []map[string]any{}
	for _, d := range h.live() {
		obs := d.Observe()
		in := map[string]any{"Device": d.Name(), "Model": d.Model()}
		secs := obs.Sections()
		if sec, ok := secs.Get(what); ok {
			in[sectionKeys[what]] = sec
			var text strings.Builder
			tw := tabwriter.NewWriter(&text, 0, 4, 2, ' ', 0)
			obs.Print(tw, what)
			tw.Flush()
			in["Text"] = text.String()
		}
		out = append(out, in)
	}
	return out, nil
}

const inspectUsage = `usage: hcaemu inspect --control SOCK [--json] [devices|ports|gids|pds|mrs|cqs|qps|srqs|eqs|stats]

Shows what the emulated HCAs of a running "hcaemu run" or "hcaemu serve
--control SOCK" hold: the device-side mirror of the guests' "rdma resource
show", for every device model. QPs with their state, PSNs, outstanding
requests, retry and RNR counts and peer (mlx5: the LIDs); MRs (mlx5: the
mkeys) with keys, range, access and PD; CQs and rings with their
indices; mlx5's EQs and port (LID, SM LID, state); strict-mode findings
and drop counters (stats). Without an argument: everything, per device.
`

func inspectMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hcaemu inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	control := fs.String("control", "", "the control socket of hcaemu run (printed at its start) or hcaemu serve --control")
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, inspectUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "hcaemu inspect: %v (see hcaemu inspect -h)\n", err)
		return 2
	}
	if *control == "" {
		fmt.Fprintln(stderr, "hcaemu inspect: give --control SOCK")
		return 2
	}
	what := "devices"
	switch fs.NArg() {
	case 0:
	case 1:
		what = fs.Arg(0)
		if !slices.Contains(inspectWhat, what) {
			fmt.Fprintf(stderr, "hcaemu inspect: unknown %q: want %s\n", what, strings.Join(inspectWhat, ", "))
			return 2
		}
	default:
		fmt.Fprintf(stderr, "hcaemu inspect: one of %s, not %d arguments\n", strings.Join(inspectWhat, ", "), fs.NArg())
		return 2
	}
	rsp, err := controlCommand(*control, fault.Request{Op: "inspect", What: what})
	if err != nil {
		fmt.Fprintf(stderr, "hcaemu inspect: %v\n", err)
		return 1
	}
	if !rsp.OK {
		fmt.Fprintf(stderr, "hcaemu inspect: %s\n", rsp.Error)
		return 1
	}
	if *asJSON {
		stdout.Write(rsp.Inspect)
		fmt.Fprintln(stdout)
		return 0
	}
	var devs []inspected
	if err := json.Unmarshal(rsp.Inspect, &devs); err != nil {
		fmt.Fprintf(stderr, "hcaemu inspect: bad answer: %v\n", err)
		return 1
	}
	printInspected(stdout, devs)
	return 0
}

// printInspected writes the answer, one section per device.
func printInspected(w io.Writer, devs []inspected) {
	if len(devs) == 0 {
		fmt.Fprintln(w, "no devices (no guest has connected yet)")
		return
	}
	for i, d := range devs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s (%s)\n%s", d.Device, d.Model, d.Text)
	}
}
