package fault

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
)

// Request is one live-control command, a JSON line:
//
//	{"op":"add","rule":{...}}      add a rule (the plan's rule syntax)
//	{"op":"rm","name":"loss"}      remove a rule
//	{"op":"enable","name":"loss"}  arm a rule
//	{"op":"disable","name":"loss"} disarm a rule
//	{"op":"list"}                  the rules with their state and counters
//	{"op":"stats"}                 the counters (and the seed)
//	{"op":"clear"}                 remove every rule
//	{"op":"inspect","what":"qps"}  what the devices hold (host socket only;
//	                               see SetInspector)
//	{"op":"trace","what":"hca0:5"} stream the devices' trace events (host
//	                               socket only; see SetTracer): after the
//	                               response, JSON lines until the client
//	                               closes the connection
//
// An optional "id" is echoed in the response, so that a client sharing a
// byte stream with earlier clients (a guest's virtio-serial port) can tell
// its own reply from stale ones.
type Request struct {
	Op   string          `json:"op"`
	Name string          `json:"name,omitempty"`
	Rule json.RawMessage `json:"rule,omitempty"`
	What string          `json:"what,omitempty"` // inspect: which objects
	ID   string          `json:"id,omitempty"`
}

// Response answers a Request: OK, or Error and nothing changed.
type Response struct {
	OK    bool        `json:"ok"`
	Error string      `json:"error,omitempty"`
	Name  string      `json:"name,omitempty"` // add: the rule's name
	Rules []RuleState `json:"rules,omitempty"`
	Stats *Stats      `json:"stats,omitempty"`
	// Inspect is the inspector's answer (JSON).
	Inspect json.RawMessage `json:"inspect,omitempty"`
	ID      string          `json:"id,omitempty"` // the request's id
}

// maxRequest bounds a command line.
const maxRequest = 1 << 20

// Do executes one command.
func (inj *Injector) Do(req Request) Response {
	fail := func(err error) Response { return Response{Error: err.Error()} }
	needName := func() error {
		if req.Name == "" {
			return fmt.Errorf("%s: give the rule's name", req.Op)
		}
		return nil
	}
	if req.Op != "add" && len(req.Rule) > 0 {
		return fail(fmt.Errorf("%s takes no rule", req.Op))
	}
	switch req.Op {
	case "add":
		if len(req.Rule) == 0 {
			return fail(errors.New("add: give the rule"))
		}
		if req.Name != "" {
			return fail(errors.New("add: the name goes in the rule"))
		}
		rule, err := DecodeRule(req.Rule)
		if err != nil {
			return fail(err)
		}
		name, err := inj.Add(rule)
		if err != nil {
			return fail(err)
		}
		return Response{OK: true, Name: name}
	case "rm", "enable", "disable":
		if err := needName(); err != nil {
			return fail(err)
		}
		var err error
		switch req.Op {
		case "rm":
			err = inj.Remove(req.Name)
		case "enable":
			err = inj.SetArmed(req.Name, true)
		default:
			err = inj.SetArmed(req.Name, false)
		}
		if err != nil {
			return fail(err)
		}
		return Response{OK: true, Name: req.Name}
	case "list", "stats", "clear":
		if req.Name != "" {
			return fail(fmt.Errorf("%s takes no name", req.Op))
		}
		if req.Op == "clear" {
			inj.Clear()
			return Response{OK: true}
		}
		s := inj.Stats()
		if req.Op == "list" {
			return Response{OK: true, Rules: s.Rules}
		}
		return Response{OK: true, Stats: &s}
	}
	return fail(fmt.Errorf("unknown op %q: want add, rm, enable, disable, list, stats or clear", req.Op))
}

// Control answers live commands for an injector, one JSON line per command
// and per response, on connections its user accepts (cmd/hcaemu listens on
// the host's control socket and on each guest's virtio-serial socket; this
// package knows no sockets): Serve for the host's, ServeGuest for a
// guest's.
type Control struct {
	inj     *Injector
	inspect atomic.Pointer[Inspector]
	trace   atomic.Pointer[Tracer]

	mu     sync.Mutex
	conns  map[io.Closer]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewControl answers commands for inj.
func NewControl(inj *Injector) *Control {
	return &Control{inj: inj, conns: map[io.Closer]struct{}{}}
}

// track adds conn to the connections Close closes; false (conn closed)
// once Close has run.
func (c *Control) track(conn io.Closer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return false
	}
	c.conns[conn] = struct{}{}
	c.wg.Add(1)
	return true
}

func (c *Control) untrack(conn io.Closer) {
	c.mu.Lock()
	delete(c.conns, conn)
	c.mu.Unlock()
	conn.Close()
	c.wg.Done()
}

// answer executes one command line (from a guest: with the guests' limits).
func (c *Control) answer(text string, guest bool) Response {
	var req Request
	if err := strictDecode(strings.NewReader(text), &req); err != nil {
		return Response{Error: "bad command: " + err.Error()}
	}
	if req.Op == "trace" {
		return Response{Error: "trace: not served to guests", ID: req.ID}
	}
	if req.Op == "inspect" {
		rsp := c.answerInspect(req, guest)
		rsp.ID = req.ID
		return rsp
	}
	if req.What != "" {
		return Response{Error: fmt.Sprintf("%s takes no \"what\"", req.Op), ID: req.ID}
	}
	if guest && req.Op == "add" && c.inj.nrule.Load() >= MaxGuestRules {
		return Response{Error: fmt.Sprintf("add: the plan has %d rules, a guest may add rules up to %d", c.inj.nrule.Load(), MaxGuestRules), ID: req.ID}
	}
	rsp := c.inj.Do(req)
	rsp.ID = req.ID
	return rsp
}

// Inspector answers the inspect command: what names the objects to show
// (the inspector says which it knows); the answer is encoded as JSON.
type Inspector func(what string) (any, error)

// SetInspector makes the control socket answer inspect with fn. Guests'
// sockets never do: a guest sees only its own device, through its driver.
func (c *Control) SetInspector(fn Inspector) { c.inspect.Store(&fn) }

func (c *Control) answerInspect(req Request, guest bool) Response {
	fn := c.inspect.Load()
	switch {
	case guest:
		return Response{Error: "inspect: not served to guests"}
	case fn == nil:
		return Response{Error: "inspect: this process has no devices to inspect"}
	case req.Name != "" || len(req.Rule) > 0:
		return Response{Error: "inspect takes only \"what\""}
	}
	v, err := (*fn)(req.What)
	if err != nil {
		return Response{Error: "inspect: " + err.Error()}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return Response{Error: "inspect: " + err.Error()}
	}
	return Response{OK: true, Inspect: b}
}

// Tracer opens a trace stream: what selects the events (the tracer says
// how); the stream writes JSON lines to w until ctx ends or a write fails.
type Tracer func(what string) (stream func(ctx context.Context, w io.Writer) error, err error)

// SetTracer makes the control socket answer trace with fn. Guests' sockets
// never do.
func (c *Control) SetTracer(fn Tracer) { c.trace.Store(&fn) }

// openTrace answers a trace command: the stream to run after the
// response, or an error response.
func (c *Control) openTrace(text string) (func(ctx context.Context, w io.Writer) error, Response) {
	var req Request
	if err := strictDecode(strings.NewReader(text), &req); err != nil || req.Op != "trace" {
		return nil, Response{}
	}
	fn := c.trace.Load()
	switch {
	case fn == nil:
		return nil, Response{Error: "trace: this process has no devices to trace", ID: req.ID}
	case req.Name != "" || len(req.Rule) > 0:
		return nil, Response{Error: "trace takes only \"what\"", ID: req.ID}
	}
	stream, err := (*fn)(req.What)
	if err != nil {
		return nil, Response{Error: "trace: " + err.Error(), ID: req.ID}
	}
	return stream, Response{OK: true, ID: req.ID}
}

// Serve answers the commands of one host connection until it ends or
// Close closes it; it closes conn. A trace command turns the connection into
// the trace's stream until the client closes its side.
func (c *Control) Serve(conn io.ReadWriteCloser) {
	if !c.track(conn) {
		return
	}
	defer c.untrack(conn)
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 4096), maxRequest)
	enc := json.NewEncoder(conn)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		if stream, rsp := c.openTrace(text); stream != nil || rsp.Error != "" {
			if enc.Encode(rsp) != nil || stream == nil {
				return
			}
			// The connection is the stream's now: it ends when the client
			// closes its side (the read below returns) or Close closes it.
			ctx, cancel := context.WithCancel(context.Background())
			c.wg.Go(func() {
				io.Copy(io.Discard, conn)
				cancel()
			})
			stream(ctx, conn)
			cancel()
			return
		}
		if enc.Encode(c.answer(text, false)) != nil {
			return
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		enc.Encode(Response{Error: fmt.Sprintf("bad command: longer than %d bytes", maxRequest)})
	}
}

// MaxGuestLine bounds a command line from a guest: a longer line is
// answered with an error and skipped, and the port stays usable.
const MaxGuestLine = 64 << 10

// MaxGuestRules bounds the plan guests can grow: every frame meets every
// rule, so a guest adding rules in a loop would slow the fabric of all. A
// guest's add is refused while the plan has this many rules (the host's
// plan and control socket are not bounded).
const MaxGuestRules = 1024

// ServeGuest answers the commands of one guest (its virtio-serial port's
// socket, which QEMU connects to, again after a reconnection) until the
// connection ends or Close closes it; it closes conn. The commands and
// responses are those of Serve; unlike a host client, a guest never loses
// its connection for what it writes: a line longer than MaxGuestLine or not
// a command is answered with an error, and the next line is read; its add is
// refused while the plan has MaxGuestRules rules. Lines are answered one at
// a time, in order: while a reply cannot be written (the guest does not read
// its port), the guest's next lines wait in the connection, so a guest holds
// at most one pending reply and never delays the other guests or the host.
func (c *Control) ServeGuest(conn io.ReadWriteCloser) {
	if !c.track(conn) {
		return
	}
	defer c.untrack(conn)
	r := bufio.NewReaderSize(conn, 4096)
	enc := json.NewEncoder(conn)
	for {
		line, tooLong, err := readLine(r, MaxGuestLine)
		if err != nil {
			return
		}
		var rsp Response
		switch text := strings.TrimSpace(string(line)); {
		case tooLong:
			rsp.Error = fmt.Sprintf("bad command: longer than %d bytes", MaxGuestLine)
		case text == "":
			continue
		default:
			rsp = c.answer(text, true)
		}
		if enc.Encode(rsp) != nil {
			return
		}
	}
}

// readLine reads one line (without its newline) of at most limit bytes; of a
// longer line it keeps nothing, reads on to its end and reports tooLong.
func readLine(r *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) <= limit+1 {
			line = append(line, chunk...)
		} else {
			tooLong, line = true, nil
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(line, []byte("\n")), tooLong, nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, false, err
		}
	}
}

// Close closes every connection being served, and any later one, and
// waits for their Serve and ServeGuest to return.
func (c *Control) Close() {
	c.mu.Lock()
	c.closed = true
	for conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}
