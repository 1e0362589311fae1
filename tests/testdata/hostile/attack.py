# The hostile guest of TestE2EHostileGuest (guest 2): pyverbs, Python 3.
# Prints ATTACK lines the Go test asserts on. Reads the victim's addresses
# from the share ($1: the share's guest path).
import ctypes, glob, ipaddress, mmap, os, re, socket, struct, subprocess, sys, time, zlib
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

share = sys.argv[1]
DEV, PORT, SGID = 'vmw_pvrdma0', 1, 1


def say(*a):
    print('ATTACK', *a, flush=True)


def wait_for(pred, what, limit=180.0):
    # Bounded poll on a condition another party makes true.
    end = time.monotonic() + limit
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    say('TIMEOUT', what, 'gids', sorted(gids()))
    sys.exit(2)


def gids():
    out = set()
    for path in glob.glob(f'/sys/class/infiniband/{DEV}/ports/{PORT}/gids/*'):
        try:
            with open(path) as f:
                out.add(f.read().strip())
        except OSError:
            pass
    return out


def exploded(gid):
    # As sysfs prints a GID: eight groups of four hex digits (Python's own
    # exploded form writes an IPv4-mapped address with a dotted quad).
    b = ipaddress.IPv6Address(gid).packed
    return ':'.join(f'{b[i]:02x}{b[i + 1]:02x}' for i in range(0, 16, 2))


# (a) Take guest 1's IPv4 address: the kernel asks the HCA to bind its GID,
# which guest 1's HCA holds (CREATE_BIND: EADDRINUSE). A fresh address added
# after it is the positive control: once its GID shows, the stolen one's add
# was processed before it (the GID work runs in order).
stolen, fresh = '10.0.0.2', '10.0.0.99'
want_stolen = exploded('::ffff:' + stolen)
want_fresh = exploded('::ffff:' + fresh)
subprocess.run(['ip', 'addr', 'add', stolen + '/24', 'dev', 'eth0'], check=True)
subprocess.run(['ip', 'addr', 'add', fresh + '/24', 'dev', 'eth0'], check=True)
wait_for(lambda: want_fresh in gids(), 'fresh GID ' + fresh)
table = gids()
say('gid-takeover', 'SUCCEEDED' if want_stolen in table else 'failed', stolen, 'control', fresh, 'present')
subprocess.run(['ip', 'addr', 'del', stolen + '/24', 'dev', 'eth0'], check=True)
subprocess.run(['ip', 'addr', 'del', fresh + '/24', 'dev', 'eth0'], check=True)
# Armed: guest 1 starts the victim's client only now, so the victim's ARP
# never met the stolen address, and the injections below meet its traffic.
open(os.path.join(share, 'g2.armed'), 'w').close()

ctx = Context(name=DEV)
pd = PD(ctx)


def rc_qp(cq):
    cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_INIT
    attr.pkey_index = 0
    attr.port_num = PORT
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    return qp


def connect(qp, dgid, dqpn, rq_psn, sq_psn):
    # Small timeout and retry count: a peer that drops our packets ends
    # the WR in RETRY_EXC_ERR quickly.
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_RTR
    attr.path_mtu = e.IBV_MTU_1024
    attr.dest_qp_num = dqpn
    attr.rq_psn = rq_psn
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 1
    gr = GlobalRoute(dgid=GID(exploded(dgid)), sgid_index=SGID, hop_limit=64)
    attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=PORT)
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
              e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_RTS
    attr.timeout = 8
    attr.retry_cnt = 1
    attr.rnr_retry = 1
    attr.sq_psn = sq_psn
    attr.max_rd_atomic = 1
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY |
              e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)


def wait_wc(cq, what, limit=60.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        n, wcs = cq.poll(1)
        if n > 0:
            return wcs[0]
    say('TIMEOUT', 'completion', what)
    sys.exit(2)


def mapped(size):
    buf = mmap.mmap(-1, size)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    return buf, addr


# (b) Inject into the victim's RC connection (guest 0's QP, fed by guest 1):
# RC QPs of our own, from our own GID (we cannot send from another: (a)),
# connected to the victim's QPN with PSNs around what it expects.
line_re = re.compile(r'(local|remote) address:.*QPN (0x[0-9a-f]+), PSN (0x[0-9a-f]+), GID (\S+)')


def victim():
    try:
        with open(os.path.join(share, 'g0.out')) as f:
            found = {m.group(1): m for m in map(line_re.search, f) if m}
    except OSError:
        return None
    return found if len(found) == 2 else None


found = wait_for(victim, 'victim addresses in g0.out')
vqpn = int(found['local'].group(2), 16)
vgid = found['local'].group(4)
epsn = int(found['remote'].group(3), 16)  # guest 1's first PSN: what guest 0 expects
say('victim', hex(vqpn), 'gid', vgid, 'epsn', hex(epsn))

# (d) Raw frames through our own NIC (AF_PACKET on eth0): RoCEv2 SEND_ONLY
# packets to the victim's QP at PSNs from what it expects on, valid to the
# last bit (ICRC included), sent as guest 1 would send them: from guest 1's
# address with our MAC, and from guest 1's address and MAC. The segment
# must drop both at our port (counted as spoofed) before any HCA sees them.
# The same packets from our own address are the control: they pass the
# segment, reach the victim's HCA and QP, and are dropped there by the QP's
# address check (counted per device as "address"): the spoofed ones were
# good enough to be accepted but for where they came from.
def mac_bytes(m):
    return bytes(int(x, 16) for x in m.split(':'))


def roce_frame(dmac, smac, sip, dip, qpn, psn, payload):
    bth = struct.pack('>BBHBBHBBH', 0x04, 0x00, 0xffff, 0, qpn >> 16, qpn & 0xffff, 0x80, psn >> 16, psn & 0xffff)
    udp_len = 8 + len(bth) + len(payload) + 4
    udp = struct.pack('>HHHH', 0xc000 | (psn & 0x3fff), 4791, udp_len, 0)
    ip = bytearray(struct.pack('>BBHHHBBH4s4s', 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                               socket.inet_aton(sip), socket.inet_aton(dip)))
    csum = sum(struct.unpack('>10H', bytes(ip)))
    csum = (csum & 0xffff) + (csum >> 16)
    csum = (csum & 0xffff) + (csum >> 16)
    ip[10:12] = struct.pack('>H', ~csum & 0xffff)
    masked_ip = bytearray(ip); masked_ip[1] = 0xff; masked_ip[8] = 0xff; masked_ip[10:12] = b'\xff\xff'
    masked_udp = bytearray(udp); masked_udp[6:8] = b'\xff\xff'
    masked_bth = bytearray(bth); masked_bth[4] = 0xff
    icrc = zlib.crc32(b'\xff' * 8 + bytes(masked_ip) + bytes(masked_udp) + bytes(masked_bth) + payload) & 0xffffffff
    return dmac + smac + b'\x08\x00' + bytes(ip) + udp + bth + payload + struct.pack('<I', icrc)


raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
raw.bind(('eth0', 0))
with open('/sys/class/net/eth0/address') as f:
    own_mac = mac_bytes(f.read().strip())
g0_mac, g1_mac = mac_bytes('52:54:0a:00:00:01'), mac_bytes('52:54:0a:00:00:02')
own_ip = '10.0.0.3'
per_kind = 256
for smac, sip in ((own_mac, '10.0.0.2'), (g1_mac, '10.0.0.2'), (own_mac, own_ip)):
    for k in range(per_kind):
        raw.send(roce_frame(g0_mac, smac, sip, '10.0.0.1', vqpn, (epsn + k) & 0xffffff, bytes([0xee]) * 64))
raw.close()
say('raw', 'spoofed-ip', per_kind, 'spoofed-mac', per_kind, 'control', per_kind)

size = 4096
local, laddr = mapped(size)
lmr = MR(pd, size, e.IBV_ACCESS_LOCAL_WRITE, address=laddr)
sent = {'send': 0, 'write': 0}
success = 0
statuses = {}
rounds = 0
for delta in (0, 1, 2, 3, 8, 64, 512, -1):
    for kind in ('send', 'write'):
        for variant in range(2):
            psn = (epsn + delta) & 0xffffff
            cq = CQ(ctx, 16)
            qp = rc_qp(cq)
            connect(qp, vgid, vqpn, 0, psn)
            local[0:size] = bytes([0xee]) * size
            wr = SendWR(wr_id=rounds, opcode=e.IBV_WR_SEND if kind == 'send' else e.IBV_WR_RDMA_WRITE,
                        num_sge=1, sg=[SGE(laddr, 64, lmr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
            if kind == 'write':
                # R_Key = MR handle << 8 | variant; the victim has a handful of MRs.
                wr.set_wr_rdma((1 + rounds % 4) << 8 | variant, 0x10000)
            qp.post_send(wr)
            sent[kind] += 1
            wc = wait_wc(cq, kind)
            statuses[wc.status] = statuses.get(wc.status, 0) + 1
            if wc.status == e.IBV_WC_SUCCESS:
                success += 1
            qp.close()
            cq.close()
            rounds += 1
done = os.path.exists(os.path.join(share, 'g0.done'))
say('injected', 'sends', sent['send'], 'writes', sent['write'], 'success', success,
    'statuses', ','.join(f'{k}:{v}' for k, v in sorted(statuses.items())),
    'victim-finished-before-end', done)

# (c) Deregister an MR under our own traffic: a second QP pair inside this
# guest (loopback through our own HCA), one side WRITE-ing into the other's
# MR while it is deregistered. After dereg returns, the buffer (still mapped)
# must not change, and later WRITEs must fail (remote access error).
mygid = ctx.query_gid(PORT, SGID).gid
changed = 0
after_errors = 0
in_flight = {}
for rnd in range(3):
    cq_a, cq_b = CQ(ctx, 64), CQ(ctx, 64)
    qp_a, qp_b = rc_qp(cq_a), rc_qp(cq_b)
    connect(qp_a, mygid, qp_b.qp_num, 100, 200)
    connect(qp_b, mygid, qp_a.qp_num, 200, 100)
    target, taddr = mapped(size)
    target[0:size] = bytes([0x11]) * size
    tmr = MR(pd, size, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE, address=taddr)
    rkey = tmr.rkey
    local[0:size] = bytes([0x20 + rnd]) * size
    # One WRITE that must land (the path works), then a burst in flight
    # while the MR is deregistered, then WRITEs to the old R_Key.
    wr = SendWR(wr_id=0, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(laddr, size, lmr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(rkey, taddr)
    qp_a.post_send(wr)
    wc = wait_wc(cq_a, 'first write')
    if wc.status != e.IBV_WC_SUCCESS or target[0:size] != bytes([0x20 + rnd]) * size:
        say('mr-path-broken', rnd, wc.status)
        sys.exit(3)
    local[0:size] = bytes([0x40 + rnd]) * size
    burst = 8
    for i in range(burst):
        wr = SendWR(wr_id=1 + i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(laddr, size, lmr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(rkey, taddr)
        qp_a.post_send(wr)
    tmr.close()  # DESTROY_MR under the burst
    snap = bytes(target[0:size])
    local[0:size] = bytes([0x60 + rnd]) * size
    for i in range(4):
        wr = SendWR(wr_id=100 + i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(laddr, size, lmr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(rkey, taddr)
        qp_a.post_send(wr)
    for i in range(burst + 4):
        wc = wait_wc(cq_a, 'burst')
        key = 'after' if wc.wr_id >= 100 else 'in-flight'
        in_flight[(key, wc.status)] = in_flight.get((key, wc.status), 0) + 1
        if wc.wr_id >= 100 and wc.status != e.IBV_WC_SUCCESS:
            after_errors += 1
        if wc.wr_id >= 100 and wc.status == e.IBV_WC_SUCCESS:
            say('write-after-dereg-SUCCEEDED', rnd)
    if bytes(target[0:size]) != snap:
        changed += 1
    qp_a.close(); qp_b.close(); cq_a.close(); cq_b.close()
say('dereg', 'rounds', 3, 'buffer', 'CHANGED' if changed else 'unchanged',
    'after-writes-failed', after_errors, 'completions',
    ','.join(f'{k[0]}/{k[1]}:{v}' for k, v in sorted(in_flight.items())))
# The host reads the segment's counters now, while the run is up.
open(os.path.join(share, 'g2.scrape'), 'w').close()
wait_for(lambda: os.path.exists(os.path.join(share, 'host.scraped')), 'the host to read the counters')
say('END')
