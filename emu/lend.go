package emu

// revokeLoans is revoke for a device that may lend nothing.
func (d *Device) revokeLoans() {
	if d.lend != nil {
		d.lend.Revoke()
	}
}
