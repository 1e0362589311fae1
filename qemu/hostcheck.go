package qemu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
)

// hostFacts is what provisioning needs of the host, gathered before
// anything is downloaded (gatherHostFacts); checkHost turns what is missing
// into one line naming the fix.
type hostFacts struct {
	root        bool   // running as root
	user        string // the user's name (for the fixing commands)
	newuidmap   bool   // newuidmap and newgidmap are installed (uidmap)
	subuid      bool   // the user has an /etc/subuid range
	subgid      bool   // and an /etc/subgid range
	freeSubID   int64  // the first ID after every range of /etc/subuid and /etc/subgid
	aptGet      bool   // apt-get is installed
	needTools   bool   // mmdebstrap is still to be fetched (apt-get download)
	aptKnows    bool   // apt's package lists know mmdebstrap
	mirrorErr   error  // no Debian mirror (Mirror's error)
	needGo      bool   // the initramfs is still to be built (with go)
	goErr       error  // no go command (goTool's error)
	free        uint64 // free bytes in the cache's file system (0: unknown)
	freeChecked bool
}

// checkHost returns the first thing the host lacks for provisioning, as one
// line with the command that fixes it.
func checkHost(h hostFacts) error {
	if !h.root {
		if !h.newuidmap {
			return errors.New("provisioning as a non-root user needs newuidmap and newgidmap (mmdebstrap's unshare mode): as root, run: apt-get install uidmap")
		}
		if !h.subuid || !h.subgid {
			which := "/etc/subuid and /etc/subgid ranges"
			switch {
			case h.subuid:
				which = "an /etc/subgid range"
			case h.subgid:
				which = "an /etc/subuid range"
			}
			first := max(h.freeSubID, 100000)
			return fmt.Errorf("provisioning as a non-root user needs %s for %s (subordinate IDs own the root file systems): as root, run: usermod --add-subuids %d-%d --add-subgids %d-%d %s",
				which, h.user, first, first+65535, first, first+65535, h.user)
		}
	}
	if !h.aptGet {
		return errors.New("apt-get not found: hcaemu provisions from a Debian mirror with apt-get and mmdebstrap: run it on Debian or a derivative (apt-get install apt)")
	}
	if h.needTools && !h.aptKnows {
		if h.root {
			return nil // provisioning runs apt-get update itself
		}
		return errors.New("apt's package lists do not know mmdebstrap (apt-get download needs them): as root, run: apt-get update")
	}
	if h.mirrorErr != nil {
		return h.mirrorErr
	}
	if h.needGo && h.goErr != nil {
		return h.goErr
	}
	if h.freeChecked && h.free < minFreeBytes {
		return fmt.Errorf("only %.1f GB free in the cache's file system; provisioning needs about 3 GB: free some space or set HCAEMU_CACHE to another disk", float64(h.free)/1e9)
	}
	return nil
}

// gatherHostFacts looks at the host for provisioning into cache.
func (p *provisioner) gatherHostFacts(ctx context.Context, cache string) hostFacts {
	h := hostFacts{root: os.Geteuid() == 0}
	if u, err := userName(); err == nil {
		h.user = u
	} else {
		h.user = strconv.Itoa(os.Geteuid())
	}
	if !h.root {
		_, e1 := exec.LookPath("newuidmap")
		_, e2 := exec.LookPath("newgidmap")
		h.newuidmap = e1 == nil && e2 == nil
		uid := strconv.Itoa(os.Geteuid())
		_, _, h.subuid = subIDRange("/etc/subuid", h.user, uid)
		gid := strconv.Itoa(os.Getegid())
		_, _, h.subgid = subIDRange("/etc/subgid", h.user, gid)
		h.freeSubID = max(subIDEnd("/etc/subuid"), subIDEnd("/etc/subgid"))
	}
	_, err := exec.LookPath("apt-get")
	h.aptGet = err == nil
	t, _, _, _, i := p.keys()
	h.needTools = !p.st.done("tools", t) && p.toolsDir == ""
	if h.aptGet && h.needTools {
		h.aptKnows = exec.CommandContext(ctx, "apt-cache", "show", "mmdebstrap").Run() == nil
	}
	if h.aptGet || os.Getenv("HCAEMU_MIRROR") != "" {
		_, h.mirrorErr = p.getMirror(ctx)
	} else {
		h.mirrorErr = ErrNoMirror
	}
	h.needGo = !p.st.done("initramfs", i) && p.toolsDir == "" // (an image alone needs no Go)
	_, h.goErr = goTool()
	if free, err := freeBytes(cache); err == nil {
		h.free, h.freeChecked = free, true
	}
	return h
}

// preflight checks the host before anything is downloaded into cache.
func (p *provisioner) preflight(ctx context.Context, cache string) error {
	return checkHost(p.gatherHostFacts(ctx, cache))
}

// subIDRange returns the first subordinate ID range of a user (by name or
// numeric ID) in an /etc/subuid-format file.
func subIDRange(path, name, id string) (start, count int64, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		s, n, who, good := parseSubID(sc.Text())
		if good && (who == name || who == id) && n > 0 {
			return s, n, true
		}
	}
	return 0, 0, false
}

// subIDEnd returns the first ID after every range of an /etc/subuid-format
// file (0 if none).
func subIDEnd(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var end int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s, n, _, ok := parseSubID(sc.Text()); ok {
			end = max(end, s+n)
		}
	}
	return end
}

// parseSubID parses a "NAME:START:COUNT" line.
func parseSubID(line string) (start, count int64, who string, ok bool) {
	f := strings.Split(strings.TrimSpace(line), ":")
	if len(f) != 3 || strings.HasPrefix(f[0], "#") {
		return 0, 0, "", false
	}
	s, err1 := strconv.ParseInt(f[1], 10, 64)
	n, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, "", false
	}
	return s, n, f[0], true
}

// userName is the name of the effective user.
func userName() (string, error) {
	u, err := user.LookupId(strconv.Itoa(os.Geteuid()))
	if err != nil {
		return "", err
	}
	return u.Username, nil
}
