package mr

import "strings"

// AccessString names access flags as the verbs do (LOCAL_READ alone
// when none is set): for hcaemu inspect.
func AccessString(access uint32) string {
	var names []string
	for _, f := range []struct {
		bit  uint32
		name string
	}{{LocalWrite, "LOCAL_WRITE"}, {RemoteWrite, "REMOTE_WRITE"}, {RemoteRead, "REMOTE_READ"},
		{RemoteAtomic, "REMOTE_ATOMIC"}, {MWBind, "MW_BIND"}} {
		if access&f.bit != 0 {
			names = append(names, f.name)
		}
	}
	if len(names) == 0 {
		return "LOCAL_READ"
	}
	return strings.Join(names, "|")
}
