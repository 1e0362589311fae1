package ifc

import "testing"

// TestVerbsLayoutsAgainstSpec: the verbs layouts' bit offsets against the
// spec's notation (../shared/spec/mlx5.md §5.4.1, §6: "0xBB dwD[h:l]"
// with offsets absolute in the command, or relative to the context where
// the spec says so), written from the spec's tables rather than derived
// from the Field values.
func TestVerbsLayoutsAgainstSpec(t *testing.T) {
	dw := func(d, h, l uint32) Field { return Field{d*32 + 31 - h, h - l + 1} }
	dw64 := func(d uint32) Field { return Field{d * 32, 64} }
	qp := func(f Field) Field { return At(QPInQPC, f) }
	cq := func(f Field) Field { return At(CreateCQInCQC, f) }
	mk := func(f Field) Field { return At(CreateMkeyInMkc, f) }
	rmp := func(f Field) Field { return At(CreateRMPInCtx, f) }
	xrc := func(f Field) Field { return At(CreateXRCSRQInCtx, f) }
	for name, c := range map[string]struct{ got, want Field }{
		"create_qp_in.qpc.state":                  {qp(QPCState), dw(6, 31, 28)},
		"create_qp_in.qpc.st":                     {qp(QPCSt), dw(6, 23, 16)},
		"create_qp_in.qpc.pm_state":               {qp(QPCPMState), dw(6, 12, 11)},
		"create_qp_in.qpc.pd":                     {qp(QPCPD), dw(7, 23, 0)},
		"create_qp_in.qpc.block_lb_mc":            {qp(QPCBlockLbMc), dw(7, 30, 30)},
		"attach_to_mcg_in.qpn":                    {ObjIn, dw(2, 23, 0)},
		"attach_to_mcg_in.multicast_gid":          {MCGInMulticastGID, Field{4 * 32, 128}},
		"create_qp_in.qpc.mtu":                    {qp(QPCMTU), dw(8, 31, 29)},
		"create_qp_in.qpc.log_msg_max":            {qp(QPCLogMsgMax), dw(8, 28, 24)},
		"create_qp_in.qpc.log_rq_size":            {qp(QPCLogRQSize), dw(8, 22, 19)},
		"create_qp_in.qpc.log_rq_stride":          {qp(QPCLogRQStride), dw(8, 18, 16)},
		"create_qp_in.qpc.no_sq":                  {qp(QPCNoSQ), dw(8, 15, 15)},
		"create_qp_in.qpc.log_sq_size":            {qp(QPCLogSQSize), dw(8, 14, 11)},
		"create_qp_in.qpc.counter_set_id":         {qp(QPCCounterSetID), dw(9, 31, 24)},
		"create_qp_in.qpc.uar_page":               {qp(QPCUARPage), dw(9, 23, 0)},
		"create_qp_in.qpc.user_index":             {qp(QPCUserIndex), dw(10, 23, 0)},
		"create_qp_in.qpc.log_page_size":          {qp(QPCLogPageSize), dw(11, 28, 24)},
		"create_qp_in.qpc.remote_qpn":             {qp(QPCRemoteQPN), dw(11, 23, 0)},
		"qpc.primary_address_path.pkey_index":     {qp(PriPath(ADSPKeyIndex)), dw(12, 15, 0)},
		"qpc.primary_address_path.grh":            {qp(PriPath(ADSGRH)), dw(13, 23, 23)},
		"qpc.primary_address_path.mlid":           {qp(PriPath(ADSMLID)), dw(13, 22, 16)},
		"qpc.primary_address_path.rlid":           {qp(PriPath(ADSRLID)), dw(13, 15, 0)},
		"qpc.primary_address_path.ack_timeout":    {qp(PriPath(ADSAckTimeout)), dw(14, 31, 27)},
		"qpc.primary_address_path.src_addr_index": {qp(PriPath(ADSSrcAddrIndex)), dw(14, 23, 16)},
		"qpc.primary_address_path.stat_rate":      {qp(PriPath(ADSStatRate)), dw(14, 11, 8)},
		"qpc.primary_address_path.hop_limit":      {qp(PriPath(ADSHopLimit)), dw(14, 7, 0)},
		"qpc.primary_address_path.tclass":         {qp(PriPath(ADSTClass)), dw(15, 27, 20)},
		"qpc.primary_address_path.flow_label":     {qp(PriPath(ADSFlowLabel)), dw(15, 19, 0)},
		"qpc.primary_address_path.rgid_rip":       {qp(PriPath(ADSRGIDRIP)), Field{0x40 * 8, 128}},
		"qpc.primary_address_path.udp_sport":      {qp(PriPath(ADSUDPSport)), dw(20, 15, 0)},
		"qpc.primary_address_path.sl":             {qp(PriPath(ADSSL)), dw(21, 27, 24)},
		"qpc.primary_address_path.vhca_port_num":  {qp(PriPath(ADSVhcaPortNum)), dw(21, 23, 16)},
		"qpc.secondary_address_path":              {qp(QPCAltPath), Field{0x5c * 8, 44 * 8}},
		"create_qp_in.qpc.log_ack_req_freq":       {qp(QPCLogAckReqFreq), dw(34, 31, 28)},
		"create_qp_in.qpc.log_sra_max":            {qp(QPCLogSRAMax), dw(34, 23, 21)},
		"create_qp_in.qpc.retry_count":            {qp(QPCRetryCount), dw(34, 18, 16)},
		"create_qp_in.qpc.rnr_retry":              {qp(QPCRNRRetry), dw(34, 15, 13)},
		"create_qp_in.qpc.next_send_psn":          {qp(QPCNextSendPSN), dw(36, 23, 0)},
		"create_qp_in.qpc.cqn_snd":                {qp(QPCCQNSnd), dw(37, 23, 0)},
		"create_qp_in.qpc.log_rra_max":            {qp(QPCLogRRAMax), dw(42, 23, 21)},
		"create_qp_in.qpc.atomic_mode":            {qp(QPCAtomicMode), dw(42, 19, 16)},
		"create_qp_in.qpc.rre":                    {qp(QPCRRE), dw(42, 15, 15)},
		"create_qp_in.qpc.rwe":                    {qp(QPCRWE), dw(42, 14, 14)},
		"create_qp_in.qpc.rae":                    {qp(QPCRAE), dw(42, 13, 13)},
		"create_qp_in.qpc.page_offset":            {qp(QPCPageOffset), dw(42, 11, 6)},
		"create_qp_in.qpc.min_rnr_nak":            {qp(QPCMinRNRNak), dw(43, 28, 24)},
		"create_qp_in.qpc.next_rcv_psn":           {qp(QPCNextRcvPSN), dw(43, 23, 0)},
		"create_qp_in.qpc.xrcd":                   {qp(QPCXRCD), dw(44, 23, 0)},
		"create_qp_in.qpc.cqn_rcv":                {qp(QPCCQNRcv), dw(45, 23, 0)},
		"create_qp_in.qpc.dbr_addr":               {qp(QPCDBRAddr), dw64(46)},
		"create_qp_in.qpc.q_key":                  {qp(QPCQKey), dw(48, 31, 0)},
		"create_qp_in.qpc.rq_type":                {qp(QPCRQType), dw(49, 26, 24)},
		"create_qp_in.qpc.srqn_rmpn_xrqn":         {qp(QPCSRQN), dw(49, 23, 0)},
		"create_qp_in.qpc.hw_sq_wqebb_counter":    {qp(QPCHWSQCounter), dw(51, 31, 16)},
		"create_qp_in.qpc.sw_sq_wqebb_counter":    {qp(QPCSWSQCounter), dw(51, 15, 0)},
		"create_qp_in.qpc.hw_rq_counter":          {qp(QPCHWRQCounter), dw(52, 31, 0)},
		"create_qp_in.qpc.sw_rq_counter":          {qp(QPCSWRQCounter), dw(53, 31, 0)},
		"create_qp_in.input_qpn":                  {CreateQPInInputQPN, dw(2, 23, 0)},
		"create_qp_in.opt_param_mask":             {QPInOptParamMask, dw(4, 31, 0)},
		"create_cq_in.cq_context.cqe_sz":          {cq(CQCCQESz), dw(4, 23, 21)},
		"create_cq_in.cq_context.oi":              {cq(CQCOI), dw(4, 17, 17)},
		"create_cq_in.cq_context.page_offset":     {cq(CQCPageOffset), dw(6, 11, 6)},
		"create_cq_in.cq_context.log_cq_size":     {cq(CQCLogCQSize), dw(7, 28, 24)},
		"create_cq_in.cq_context.uar_page":        {cq(CQCUARPage), dw(7, 23, 0)},
		"create_cq_in.cq_context.c_eqn":           {cq(CQCCEQN), dw(9, 31, 0)},
		"create_cq_in.cq_context.log_page_size":   {cq(CQCLogPageSz), dw(10, 28, 24)},
		"create_cq_in.cq_context.dbr_addr":        {cq(CQCDBRAddr), dw64(18)},
		"create_mkey_in.pg_access":                {CreateMkeyInPgAccess, dw(3, 31, 31)},
		"mkc.free":                                {mk(MkcFree), dw(4, 30, 30)},
		"mkc.access_mode_4_2":                     {mk(MkcAccessMode42), dw(4, 28, 26)},
		"mkc.umr_en":                              {mk(MkcUMREn), dw(4, 15, 15)},
		"mkc.a":                                   {mk(MkcA), dw(4, 14, 14)},
		"mkc.lr":                                  {mk(MkcLR), dw(4, 10, 10)},
		"mkc.access_mode_1_0":                     {mk(MkcAccessMode10), dw(4, 9, 8)},
		"mkc.qpn":                                 {mk(MkcQPN), dw(5, 31, 8)},
		"mkc.mkey_7_0":                            {mk(MkcMkey70), dw(5, 7, 0)},
		"mkc.length64":                            {mk(MkcLength64), dw(7, 31, 31)},
		"mkc.en_rinval":                           {mk(MkcEnRinval), dw(7, 24, 24)},
		"mkc.pd":                                  {mk(MkcPD), dw(7, 23, 0)},
		"mkc.start_addr":                          {mk(MkcStartAddr), dw64(8)},
		"mkc.len":                                 {mk(MkcLen), dw64(10)},
		"mkc.translations_octword_size":           {mk(MkcTranslationsOctwordSize), dw(17, 31, 0)},
		// The spec writes dw18[5:0]; 6.12's mkc has log_page_size[0x5]
		// after a reserved bit: [4:0].
		"mkc.log_page_size": {mk(MkcLogPageSize), dw(18, 4, 0)},
		"create_mkey_in.translations_octword_actual_size": {CreateMkeyInTranslationsOctwordActualSize, dw(24, 31, 0)},
		"create_rmp_in.ctx.state":                         {rmp(RMPCState), dw(8, 23, 20)},
		"rmpc.wq.wq_type":                                 {rmp(RMPWQ(WQType)), dw(20, 31, 28)},
		"rmpc.wq.page_offset":                             {rmp(RMPWQ(WQPageOffset)), dw(21, 20, 16)},
		"rmpc.wq.lwm":                                     {rmp(RMPWQ(WQLWM)), dw(21, 15, 0)},
		"rmpc.wq.pd":                                      {rmp(RMPWQ(WQPD)), dw(22, 23, 0)},
		"rmpc.wq.dbr_addr":                                {rmp(RMPWQ(WQDBRAddr)), dw64(24)},
		"rmpc.wq.log_wq_stride":                           {rmp(RMPWQ(WQLogStride)), dw(28, 19, 16)},
		"rmpc.wq.log_wq_pg_sz":                            {rmp(RMPWQ(WQLogPgSz)), dw(28, 12, 8)},
		"rmpc.wq.log_wq_sz":                               {rmp(RMPWQ(WQLogSz)), dw(28, 4, 0)},
		"xrc_srqc.log_xrc_srq_size":                       {xrc(XRCSRQCLogSize), dw(4, 27, 24)},
		"xrc_srqc.log_rq_stride":                          {xrc(XRCSRQCLogRQStride), dw(5, 26, 24)},
		"xrc_srqc.xrcd":                                   {xrc(XRCSRQCXRCD), dw(5, 23, 0)},
		"xrc_srqc.page_offset":                            {xrc(XRCSRQCPageOffset), dw(6, 31, 26)},
		"xrc_srqc.cqn":                                    {xrc(XRCSRQCCQN), dw(6, 23, 0)},
		"xrc_srqc.log_page_size":                          {xrc(XRCSRQCLogPageSize), dw(8, 29, 24)},
		"xrc_srqc.user_index":                             {xrc(XRCSRQCUserIndex), dw(8, 23, 0)},
		"xrc_srqc.pd":                                     {xrc(XRCSRQCPD), dw(10, 23, 0)},
		"xrc_srqc.lwm":                                    {xrc(XRCSRQCLWM), dw(11, 31, 16)},
		"xrc_srqc.db_record_addr_h":                       {xrc(XRCSRQCDBRAddrH), dw(14, 31, 0)},
		"xrc_srqc.db_record_addr_l":                       {xrc(XRCSRQCDBRAddrL), dw(15, 31, 0)},
		"query_hca_vport_context_in.other_vport":          {QueryHCAVportContextInOtherVport, dw(2, 31, 31)},
		"query_hca_vport_context_in.port_num":             {QueryHCAVportContextInPortNum, dw(2, 19, 16)},
		"query_hca_vport_context_in.vport_number":         {QueryHCAVportContextInVportNumber, dw(2, 15, 0)},
		"hca_vport_context.has_smi":                       {HCAVportHasSMI, dw(8, 30, 30)},
		"hca_vport_context.grh_required":                  {HCAVportGRHRequired, dw(8, 28, 28)},
		"hca_vport_context.port_physical_state":           {HCAVportPortPhysicalState, dw(8, 15, 12)},
		"hca_vport_context.vport_state":                   {HCAVportVportState, dw(8, 3, 0)},
		"hca_vport_context.system_image_guid":             {HCAVportSystemImageGUID, dw64(10)},
		"hca_vport_context.port_guid":                     {HCAVportPortGUID, dw64(12)},
		"hca_vport_context.node_guid":                     {HCAVportNodeGUID, dw64(14)},
		"hca_vport_context.cap_mask1":                     {HCAVportCapMask1, dw(16, 31, 0)},
		"hca_vport_context.lid":                           {HCAVportLID, dw(24, 31, 16)},
		"hca_vport_context.sm_lid":                        {HCAVportSMLID, dw(25, 31, 16)},
		"alloc_pd_out.pd":                                 {ObjOut, dw(2, 23, 0)},
	} {
		if c.got != c.want {
			t.Errorf("%s: bit %#x width %d, spec bit %#x width %d", name, c.got.Off, c.got.Width, c.want.Off, c.want.Width)
		}
	}
	// Byte offsets and sizes.
	for name, c := range map[string]struct{ got, want uint32 }{
		"create_qp_in.qpc":                      {QPInQPC.ByteOff(), 0x18},
		"sizeof qpc":                            {QPInQPC.Width / 8, QPCSize},
		"create_rmp_in.ctx.wq":                  {At(CreateRMPInCtx, RMPCWQ).ByteOff(), 0x50},
		"create_rmp_in pas (after rmpc)":        {CreateRMPInCtx.End(), PASOffset},
		"create_xrc_srq_in.xrc_srq_context":     {CreateXRCSRQInCtx.ByteOff(), 0x10},
		"query_hca_vport_context_out.context":   {QueryHCAVportContextOutCtx.ByteOff(), 0x10},
		"sizeof query_hca_vport_context_out":    {QueryHCAVportContextOutCtx.End(), Linux612QueryHCAVportCtxOutSz},
		"least create_qp_in: the qpc's end":     {QPInQPC.End(), CreateQPInSize},
		"least query_qp_out: the qpc's end":     {QueryQPOutQPC.End(), QueryQPOutSize},
		"least create_cq_in: dbr_addr's end":    {At(CreateCQInCQC, CQCDBRAddr).End(), CreateCQInSize},
		"least create_mkey_in: actual size end": {CreateMkeyInTranslationsOctwordActualSize.End(), CreateMkeyInSize},
		"least create_rmp_in: log_wq_sz's end":  {At(CreateRMPInCtx, RMPWQ(WQLogSz)).End(), CreateRMPInSize},
		"least create_xrc_srq_in: db addr end":  {At(CreateXRCSRQInCtx, XRCSRQCDBRAddrL).End(), CreateXRCSRQInSize},
		"least vport out: sm_sl's word end":     {(At(QueryHCAVportContextOutCtx, HCAVportSMSL).Off/32 + 1) * 4, QueryHCAVportContextOutSize},
		"least object in/out: the number's end": {ObjIn.End(), DeallocPDInSize},
		"least qp_2err_in: the qpn's end":       {ObjIn.End(), QP2ErrInSize},
		"least attach_to_mcg_in: the gid's end": {MCGInMulticastGID.End(), AttachToMCGInSize},
		"least detach_from_mcg_in: gid's end":   {MCGInMulticastGID.End(), DetachFromMCGInSize},
	} {
		if c.got != c.want {
			t.Errorf("%s: %#x, spec %#x", name, c.got, c.want)
		}
	}
}
