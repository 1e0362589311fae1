package qemu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// ErrNoMirror is returned when no Debian mirror can be found in the system's
// apt configuration (and HCAEMU_MIRROR is not set).
var ErrNoMirror = errors.New("no Debian mirror configured in apt (add a 'deb http://<mirror>/debian <suite> main' line to /etc/apt/sources.list, or set HCAEMU_MIRROR)")

// parseMirrors picks the Debian archive mirror out of the output of
//
//	apt-get indextargets 'Identifier: Packages' --format '$(REPO_URI) $(RELEASE)'
//
// Security and other non-main archives (a "-security" suite, a URI naming
// debian-security, "-updates"/"-backports" are fine since they live on the
// same archive) are skipped. The first suitable URI wins; it is returned with
// a trailing slash.
func parseMirrors(out string) (string, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	var fallback string
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		uri := fields[0]
		if !strings.HasPrefix(uri, "http://") && !strings.HasPrefix(uri, "https://") && !strings.HasPrefix(uri, "file:/") {
			continue
		}
		if !strings.HasSuffix(uri, "/") {
			uri += "/"
		}
		suite := ""
		if len(fields) > 1 {
			suite = fields[1]
		}
		if strings.Contains(uri, "debian-security") || strings.HasSuffix(suite, "-security") ||
			strings.Contains(uri, "security.debian.org") || strings.Contains(uri, "debian-ports") {
			continue
		}
		if strings.Contains(suite, "-") {
			if fallback == "" {
				fallback = uri
			}
			continue
		}
		return uri, nil
	}
	if fallback != "" {
		return fallback, nil
	}
	return "", ErrNoMirror
}

// Mirror returns the Debian mirror URI: $HCAEMU_MIRROR if set, else the one
// configured for the system's apt.
func Mirror(ctx context.Context) (string, error) {
	if m := os.Getenv("HCAEMU_MIRROR"); m != "" {
		if !strings.HasSuffix(m, "/") {
			m += "/"
		}
		return m, nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", fmt.Errorf("apt-get not found: hcaemu provisions from a Debian mirror and needs a Debian-like host (or set HCAEMU_MIRROR and install mmdebstrap)")
	}
	out, err := exec.CommandContext(ctx, "apt-get", "indextargets", "Identifier: Packages",
		"--format", "$(REPO_URI) $(RELEASE)").Output()
	if err != nil {
		return "", fmt.Errorf("apt-get indextargets: %w", err)
	}
	return parseMirrors(string(out))
}

// aptOptions are passed to mmdebstrap's private apt: no recommends, and the
// mirror's Release files may be past Valid-Until.
var aptOptions = []string{
	`APT::Install-Recommends "false"`,
	`Acquire::Check-Valid-Until "false"`,
	`Acquire::Check-Date "false"`,
	`Acquire::Retries "3"`,
}
