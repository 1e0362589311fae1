package pvrdma

// revokeLoans is revoke for a device that may lend nothing.
func (d *Device) revokeLoans() {
	d.wire.RevokeLoans()
}
