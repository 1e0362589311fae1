package ifc

import "testing"

// TestLayoutsAgainstSpec: the bit offsets of the Stage 1 layouts against
// the spec's notation (../shared/spec/mlx5.md §3, §4: "dwD[h:l]", D the
// big-endian word of the structure, bit 31 its first), written from the
// spec's tables rather than derived from the Field values.
func TestLayoutsAgainstSpec(t *testing.T) {
	dw := func(d, h, l uint32) Field { return Field{d*32 + 31 - h, h - l + 1} }
	eqcAt := func(f Field) Field { return Field{CreateEQInEQContextEntry.Off + f.Off, f.Width} } // in create_eq_in
	for name, c := range map[string]struct{ got, want Field }{
		"cmd_hca_cap.page_request_disable":            {CmdHCACapPageRequestDisable, dw(0, 25, 25)},
		"cmd_hca_cap.hca_cap_2":                       {CmdHCACapHCACap2, dw(1, 31, 31)},
		"cmd_hca_cap.log_max_srq_sz":                  {CmdHCACapLogMaxSRQSz, dw(4, 31, 24)},
		"cmd_hca_cap.log_max_qp_sz":                   {CmdHCACapLogMaxQPSz, dw(4, 23, 16)},
		"cmd_hca_cap.log_max_qp":                      {CmdHCACapLogMaxQP, dw(4, 4, 0)},
		"cmd_hca_cap.log_max_srq":                     {CmdHCACapLogMaxSRQ, dw(5, 20, 16)},
		"cmd_hca_cap.log_max_cq_sz":                   {CmdHCACapLogMaxCQSz, dw(6, 23, 16)},
		"cmd_hca_cap.log_max_cq":                      {CmdHCACapLogMaxCQ, dw(6, 4, 0)},
		"cmd_hca_cap.log_max_eq_sz":                   {CmdHCACapLogMaxEQSz, dw(7, 31, 24)},
		"cmd_hca_cap.log_max_mkey":                    {CmdHCACapLogMaxMkey, dw(7, 21, 16)},
		"cmd_hca_cap.log_max_eq":                      {CmdHCACapLogMaxEQ, dw(7, 3, 0)},
		"cmd_hca_cap.log_max_klm_list_size":           {CmdHCACapLogMaxKLMListSize, dw(8, 5, 0)},
		"cmd_hca_cap.log_max_ra_req_qp":               {CmdHCACapLogMaxRaReqQP, dw(10, 21, 16)},
		"cmd_hca_cap.log_max_ra_res_qp":               {CmdHCACapLogMaxRaResQP, dw(10, 5, 0)},
		"cmd_hca_cap.pkey_table_size":                 {CmdHCACapPkeyTableSize, dw(12, 15, 0)},
		"cmd_hca_cap.local_ca_ack_delay":              {CmdHCACapLocalCAAckDelay, dw(13, 20, 16)},
		"cmd_hca_cap.port_type":                       {CmdHCACapPortType, dw(13, 9, 8)},
		"cmd_hca_cap.num_ports":                       {CmdHCACapNumPorts, dw(13, 7, 0)},
		"cmd_hca_cap.log_max_msg":                     {CmdHCACapLogMaxMsg, dw(14, 28, 24)},
		"cmd_hca_cap.stat_rate_support":               {CmdHCACapStatRateSupport, dw(15, 31, 16)},
		"cmd_hca_cap.cqe_version":                     {CmdHCACapCQEVersion, dw(15, 3, 0)},
		"cmd_hca_cap.umr_modify_entity_size_disabled": {CmdHCACapUMRModifyEntitySizeDisabled, dw(16, 24, 24)},
		"cmd_hca_cap.atomic":                          {CmdHCACapAtomic, dw(16, 1, 1)},
		"cmd_hca_cap.cq_resize":                       {CmdHCACapCQResize, dw(17, 30, 30)},
		"cmd_hca_cap.imaicl":                          {CmdHCACapImaicl, dw(17, 14, 14)},
		"cmd_hca_cap.xrc":                             {CmdHCACapXRC, dw(17, 3, 3)},
		"cmd_hca_cap.rc":                              {CmdHCACapRC, dw(17, 0, 0)},
		"cmd_hca_cap.log_pg_sz":                       {CmdHCACapLogPgSz, dw(18, 7, 0)},
		"cmd_hca_cap.bf":                              {CmdHCACapBF, dw(19, 31, 31)},
		"cmd_hca_cap.driver_version":                  {CmdHCACapDriverVersion, dw(19, 30, 30)},
		"cmd_hca_cap.log_bf_reg_size":                 {CmdHCACapLogBFRegSize, dw(19, 20, 16)},
		"cmd_hca_cap.max_wqe_sz_sq":                   {CmdHCACapMaxWQESzSQ, dw(20, 15, 0)},
		"cmd_hca_cap.max_wqe_sz_rq":                   {CmdHCACapMaxWQESzRQ, dw(21, 15, 0)},
		"cmd_hca_cap.max_qp_mcg":                      {CmdHCACapMaxQPMcg, dw(23, 24, 0)},
		"cmd_hca_cap.log_max_mcg":                     {CmdHCACapLogMaxMcg, dw(24, 7, 0)},
		"cmd_hca_cap.log_max_pd":                      {CmdHCACapLogMaxPD, dw(25, 20, 16)},
		"cmd_hca_cap.log_max_xrcd":                    {CmdHCACapLogMaxXRCD, dw(25, 4, 0)},
		"cmd_hca_cap.log_max_rmp":                     {CmdHCACapLogMaxRMP, dw(28, 28, 24)},
		"cmd_hca_cap.log_max_uctx":                    {CmdHCACapLogMaxUctx, dw(35, 28, 24)},
		"atomic_caps.atomic_req_8B_endianness_mode":   {AtomicCapsAtomicReq8BEndiannessMode, dw(2, 31, 30)},
		"atomic_caps.supported_..._mode_1":            {AtomicCapsSupportedAtomicReq8BEndiannessMode1, dw(2, 25, 25)},
		"atomic_caps.atomic_operations":               {AtomicCapsAtomicOperations, dw(4, 15, 0)},
		"atomic_caps.atomic_size_qp":                  {AtomicCapsAtomicSizeQP, dw(5, 15, 0)},
		"create_eq_in.eq_context_entry.log_eq_size":   {eqcAt(EQCLogEQSize), dw(7, 28, 24)},
		"create_eq_in.eq_context_entry.uar_page":      {eqcAt(EQCUARPage), dw(7, 23, 0)},
		"create_eq_in.eq_context_entry.intr":          {eqcAt(EQCIntr), dw(9, 11, 0)},
		"create_eq_in.eq_context_entry.log_page_size": {eqcAt(EQCLogPageSize), dw(10, 28, 24)},
		"create_eq_out.eq_number":                     {CreateEQOutEQNumber, dw(2, 7, 0)},
		"destroy_eq_in.eq_number":                     {DestroyEQInEQNumber, dw(2, 7, 0)},
		"alloc_uar_out.uar":                           {AllocUAROutUAR, dw(2, 23, 0)},
		"query_issi_out.current_issi":                 {QueryISSIOutCurrentISSI, dw(2, 15, 0)},
		"query_issi_out.supported_issi_dw0":           {QueryISSIOutSupportedISSIDw0, dw(0x6c/4, 31, 0)},
		"query_pages_out.num_pages":                   {QueryPagesOutNumPages, dw(3, 31, 0)},
		"teardown_hca_in.profile":                     {TeardownHCAInProfile, dw(2, 15, 0)},
		"enable_hca_in.function_id":                   {EnableHCAInFunctionID, dw(2, 15, 0)},
		"access_register_in.register_id":              {AccessRegisterInRegisterID, dw(2, 15, 0)},
		"query_adapter_out.ieee_vendor_id":            {QueryAdapterOutIEEEVendorID, Field{0x29 * 8, 24}},
	} {
		if c.got != c.want {
			t.Errorf("%s: bit %#x width %d, spec bit %#x width %d", name, c.got.Off, c.got.Width, c.want.Off, c.want.Width)
		}
	}
	// Byte offsets the spec gives directly.
	for name, c := range map[string]struct{ got, want uint32 }{
		"create_eq_in.event_bitmask":           {CreateEQInEventBitmask(0).ByteOff(), 0x58},
		"create_eq_in.pas":                     {CreateEQInPAS, 0x110},
		"query_adapter_out.vsd_vendor_id":      {QueryAdapterOutVSDVendorID.ByteOff(), 0x2e},
		"query_adapter_out.vsd":                {QueryAdapterOutVSD.ByteOff(), 0x30},
		"query_adapter_out.vsd_contd_psid":     {QueryAdapterOutVSDContdPSID.ByteOff(), 0x100},
		"sizeof query_adapter_out":             {QueryAdapterOutVSDContdPSID.End(), QueryAdapterOutSize},
		"query_hca_cap_out.capability":         {QueryHCACapOutCapability.ByteOff(), 0x10},
		"sizeof query_hca_cap_out":             {QueryHCACapOutCapability.End(), QueryHCACapOutSize},
		"set_driver_version_in.driver_version": {SetDriverVersionInDriverVersion.ByteOff(), 0x10},
		"sizeof set_driver_version_in":         {SetDriverVersionInDriverVersion.End(), SetDriverVersionInSize},
		"sizeof query_issi_out":                {QueryISSIOutSupportedISSIDw0.End(), QueryISSIOutSize},
		"pcap_reg.port_capability_mask[0]":     {PCAPRegPortCapabilityMask.ByteOff(), 0x04},
		"pcap_reg.local_port":                  {PCAPRegLocalPort.ByteOff(), 0x01},
	} {
		if c.got != c.want {
			t.Errorf("%s: %#x, spec %#x", name, c.got, c.want)
		}
	}
}
