package fault_test

import (
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hcaemu/hcaemu/emu/fault"
)

// controlSockets serves a fault.Control on unix sockets, as cmd/hcaemu
// does for a run (the package itself knows no sockets): the host's socket
// and one per guest.
type controlSockets struct {
	*fault.Control
	mu sync.Mutex
	ls []net.Listener
	wg sync.WaitGroup
}

func listenControl(path string, inj *fault.Injector) (*controlSockets, error) {
	c := &controlSockets{Control: fault.NewControl(inj)}
	return c, c.listen(path, func(conn net.Conn) { c.Serve(conn) })
}

// ListenGuest serves a guest's commands on the socket at path.
func (c *controlSockets) ListenGuest(path string) error {
	return c.listen(path, func(conn net.Conn) { c.ServeGuest(conn) })
}

func (c *controlSockets) listen(path string, serve func(net.Conn)) error {
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.ls = append(c.ls, l)
	c.mu.Unlock()
	c.wg.Go(func() {
		var conns sync.WaitGroup
		defer conns.Wait()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { serve(conn) })
		}
	})
	return nil
}

func (c *controlSockets) Close() {
	c.mu.Lock()
	for _, l := range c.ls {
		l.Close()
	}
	c.mu.Unlock()
	c.Control.Close()
	c.wg.Wait()
}

// command sends one command to the control socket at path.
func command(path string, req fault.Request) (fault.Response, error) {
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return fault.Response{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return fault.Response{}, err
	}
	var rsp fault.Response
	if err := json.NewDecoder(conn).Decode(&rsp); err != nil {
		return fault.Response{}, fmt.Errorf("control socket %s: %w", path, err)
	}
	return rsp, nil
}
