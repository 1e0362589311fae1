package qemu

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// requires returns the module versions a go.mod requires.
func requires(gomod string) map[string]string {
	req := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:require\s+)?([a-z0-9.\-]+\.[a-z]+/\S+) (v\S+)`).FindAllStringSubmatch(gomod, -1) {
		req[m[1]] = m[2]
	}
	return req
}

// TestGuestModule: the guest module's tool directives are the one list of
// the guest's u-root commands; it builds the initramfs builder with the same
// u-root modules this module compiles and tests it with.
func TestGuestModule(t *testing.T) {
	if len(guestCommands) < 10 {
		t.Fatalf("guest commands %v", guestCommands)
	}
	for _, c := range guestCommands {
		if !strings.HasPrefix(c, "github.com/u-root/u-root/cmds/core/") {
			t.Errorf("guest command %q is not a u-root core command", c)
		}
	}
	// init.sh and the builder rely on these.
	for _, c := range []string{"init", "gosh", "insmod", "rmmod", "ip", "shutdown", "cat", "sleep"} {
		if !slices.Contains(guestCommands, "github.com/u-root/u-root/cmds/core/"+c) {
			t.Errorf("guest commands lack %s", c)
		}
	}
	main, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mainReq, guestReq := requires(string(main)), requires(string(guestGoMod))
	for _, mod := range []string{"github.com/u-root/mkuimage", "github.com/u-root/gobusybox/src", "github.com/u-root/uio"} {
		if mainReq[mod] == "" || mainReq[mod] != guestReq[mod] {
			t.Errorf("%s: %q in go.mod, %q in guestmod/go.mod.txt", mod, mainReq[mod], guestReq[mod])
		}
	}
	if !strings.Contains(string(builderSource), "package main") {
		t.Error("builder source not embedded")
	}
}

// TestGuestToolsInREADME: the README lists the rdma-core programs every
// guest has.
func TestGuestToolsInREADME(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	m := regexp.MustCompile("The guest image has `([^`]*)`").FindStringSubmatch(text)
	if m == nil {
		t.Fatal("README: no \"The guest image has `...`\" sentence")
	}
	if listed := strings.Fields(m[1]); !slices.Equal(listed, rdmaTools) {
		t.Errorf("README lists %v\nthe guest has %v", listed, rdmaTools)
	}
}

// With an image, the command's environment (env -i in the chroot) has
// every HCAEMU_ variable the init exports for a command without one.
func TestInitImageEnv(t *testing.T) {
	exported := regexp.MustCompile(`(?m)^\s*export (HCAEMU_[A-Z0-9_]+)=`).FindAllStringSubmatch(initScript, -1)
	if len(exported) < 4 {
		t.Fatalf("init.sh exports %d HCAEMU_ variables", len(exported))
	}
	i := strings.Index(initScript, `chroot "$image" /usr/bin/env -i `)
	if i < 0 {
		t.Fatal("no chroot ... env -i in init.sh")
	}
	// The command line, with its continuation lines.
	var line strings.Builder
	for _, l := range strings.Split(initScript[i:], "\n") {
		line.WriteString(strings.TrimSuffix(l, `\`))
		if !strings.HasSuffix(l, `\`) {
			break
		}
	}
	for _, m := range exported {
		v := m[1]
		if !strings.Contains(line.String(), v+`="$`+v+`"`) && !strings.Contains(line.String(), "${"+v+"+"+v+"=$"+v+"}") {
			t.Errorf("the image's command does not get %s: %s", v, line.String())
		}
	}
}
