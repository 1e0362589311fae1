package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
)

// parseCommandFlags parses a subcommand's flags: -h prints usage and the
// flags (exit 0), a bad flag one line (exit 2), arguments left over are
// refused (exit 2). ok is false when the command is to exit with code.
func parseCommandFlags(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0, false
		}
		fmt.Fprintf(stderr, "%s: %v (see %s -h)\n", fs.Name(), err, fs.Name())
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (see %s -h)\n", fs.Name(), fs.Arg(0), fs.Name())
		return 2, false
	}
	return 0, true
}

// writeJSON prints v indented; the exit code.
func writeJSON(name string, v any, stdout, stderr io.Writer) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}
