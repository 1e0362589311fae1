package hca

import (
	"slices"
	"strings"
	"sync"
)

// Command is a command of a device model's command interface as the core
// sees it: the model's opcode and the model's own name for it, without the
// model's prefix (PVRDMA's PVRDMA_CMD_CREATE_QP and mlx5's
// MLX5_CMD_OP_CREATE_QP are both "CREATE_QP"), so one fault plan, one
// metric and one trace speak of commands the same way for every model.
type Command struct {
	Op   uint32
	Name string
}

func (c Command) String() string { return c.Name }

// CommandSet is the command names of one device model, with the prefix its
// headers put before them (fault plans may spell a command with it).
type CommandSet struct {
	Model  string
	Prefix string
	Names  []string
}

var (
	commandSetsMu sync.Mutex
	commandSets   []CommandSet
)

// RegisterCommands makes a model's command names known to whatever checks
// names the user writes (a fault plan's match.commands); each model does it
// once, from its package's init.
func RegisterCommands(set CommandSet) {
	commandSetsMu.Lock()
	defer commandSetsMu.Unlock()
	commandSets = append(commandSets, set)
}

// CommandName is the command a user named (any case, with or without a
// model's prefix), and whether some registered model has it.
func CommandName(s string) (string, bool) {
	commandSetsMu.Lock()
	defer commandSetsMu.Unlock()
	name := strings.ToUpper(s)
	for _, set := range commandSets {
		n := strings.TrimPrefix(name, set.Prefix)
		if slices.Contains(set.Names, n) {
			return n, true
		}
	}
	return "", false
}

// CommandNames lists the registered models' command names, for messages.
func CommandNames() string {
	commandSetsMu.Lock()
	defer commandSetsMu.Unlock()
	var parts []string
	for _, set := range commandSets {
		parts = append(parts, set.Model+": "+strings.Join(set.Names, ", "))
	}
	return strings.Join(parts, "; ")
}
