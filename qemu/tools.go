//go:build tools

// This file is never built. It keeps the u-root commands the guest
// initramfs is built from in go.mod, so "go mod tidy" does not drop them:
// the initramfs builder resolves them as packages of this module.
package qemu

import (
	_ "github.com/u-root/u-root/cmds/core/cat"
	_ "github.com/u-root/u-root/cmds/core/dmesg"
	_ "github.com/u-root/u-root/cmds/core/echo"
	_ "github.com/u-root/u-root/cmds/core/gosh"
	_ "github.com/u-root/u-root/cmds/core/grep"
	_ "github.com/u-root/u-root/cmds/core/init"
	_ "github.com/u-root/u-root/cmds/core/insmod"
	_ "github.com/u-root/u-root/cmds/core/ip"
	_ "github.com/u-root/u-root/cmds/core/ls"
	_ "github.com/u-root/u-root/cmds/core/lsmod"
	_ "github.com/u-root/u-root/cmds/core/mount"
	_ "github.com/u-root/u-root/cmds/core/readlink"
	_ "github.com/u-root/u-root/cmds/core/shutdown"
	_ "github.com/u-root/u-root/cmds/core/sleep"
	_ "github.com/u-root/u-root/cmds/core/uname"
)
