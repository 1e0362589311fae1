# The two guests of TestE2EPyFaults (pyverbs, Python 3): RC QPs whose
# settings the stock tools hard-code (rnr_retry, timeout, retry_cnt), owned
# by this program so it sees their async events. Guest 0 is the responder,
# guest 1 the requester; they trade QPNs, PSNs, GIDs and keys over TCP
# (guest 1 starts once guest 0 listens). Prints PYF lines the Go test
# asserts on. Every wait is bounded and says what it waited for.
import ctypes, ipaddress, json, mmap, os, random, signal, socket, subprocess, sys, time
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR

DEV, PORT, SGID, TCP_PORT = 'vmw_pvrdma0', 1, 1, 18800
guest = int(os.environ['HCAEMU_GUEST'])
server = os.environ.get('HCAEMU_SERVER_IP', '')


def say(*a):
    print('PYF', *a, flush=True)


def fail(*a):
    say('FAIL', *a)
    sys.exit(2)


def exploded(gid):
    # As sysfs prints a GID (Python writes IPv4-mapped addresses dotted).
    b = ipaddress.IPv6Address(gid).packed
    return ':'.join(f'{b[i]:02x}{b[i + 1]:02x}' for i in range(0, 16, 2))


ctx = Context(name=DEV)
pd = PD(ctx)
mygid = exploded(ctx.query_gid(PORT, SGID).gid)

# The control channel: one TCP connection, a JSON object per line.
if guest == 0:
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(('0.0.0.0', TCP_PORT))
    lsock.listen(1)
    lsock.settimeout(240)
    conn, _ = lsock.accept()
else:
    conn = socket.create_connection((server, TCP_PORT), timeout=240)
conn.settimeout(240)
rfile = conn.makefile('r')


def tell(**msg):
    conn.sendall((json.dumps(msg) + '\n').encode())


def hear(what):
    try:
        line = rfile.readline()
    except OSError as err:
        fail('waiting for', what, err)
    if not line:
        fail('the peer closed the channel while we waited for', what)
    return json.loads(line)


def mapped(size):
    buf = mmap.mmap(-1, size)
    return buf, ctypes.addressof(ctypes.c_char.from_buffer(buf))


ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def rc_qp(cq, depth=16):
    cap = QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_INIT
    attr.pkey_index = 0
    attr.port_num = PORT
    attr.qp_access_flags = ACCESS
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    return qp


def connect(qp, peer, my_psn, timeout, retry_cnt, rnr_retry):
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_RTR
    attr.path_mtu = e.IBV_MTU_1024
    attr.dest_qp_num = peer['qpn']
    attr.rq_psn = peer['psn']
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 1
    gr = GlobalRoute(dgid=GID(peer['gid']), sgid_index=SGID, hop_limit=64)
    attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=PORT)
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
              e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_RTS
    attr.timeout = timeout
    attr.retry_cnt = retry_cnt
    attr.rnr_retry = rnr_retry
    attr.sq_psn = my_psn
    attr.max_rd_atomic = 1
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY |
              e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)


def pair(name, qp, my_psn, timeout=14, retry_cnt=7, rnr_retry=7, **extra):
    # Trade addresses, connect, and meet: both QPs are in RTS after it.
    tell(qpn=qp.qp_num, psn=my_psn, gid=mygid, **extra)
    peer = hear(name + ' peer address')
    connect(qp, peer, my_psn, timeout, retry_cnt, rnr_retry)
    tell(ready=name)
    hear(name + ' peer ready')
    return peer


def wait_wc(cq, what, limit=120.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        n, wcs = cq.poll(1)
        if n > 0:
            return wcs[0]
    fail('no completion for', what, 'in', limit, 's')


def qp_state(qp):
    try:
        attr, _ = qp.query(e.IBV_QP_STATE)
        return attr.qp_state
    except Exception as err:  # the query is the driver's; report, not fail
        return f'query-failed:{err}'


# (1) RNR with rnr_retry 0. The plan answers the first RC SEND reaching
# hca0 with an RNR NAK (rule "rnr", times 1). A receive is posted, so a
# real RNR cannot happen: the NAK is the rule's. The requester's only
# completion is IBV_WC_RNR_RETRY_EXC_ERR (13); the responder's receive is
# never consumed.
cq1 = CQ(ctx, 16)
qp1 = rc_qp(cq1)
buf1, addr1 = mapped(4096)
mr1 = MR(pd, 4096, ACCESS, address=addr1)
if guest == 0:
    qp1.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(addr1, 4096, mr1.lkey)]))
    pair('rnr', qp1, 0x100)
    res = hear('rnr result')
    n, _ = cq1.poll(1)
    say('rnr', 'receiver-completions', n, 'peer-status', res['status'])
else:
    pair('rnr', qp1, 0x200, rnr_retry=0)
    buf1[0:4096] = b'\x5a' * 4096
    qp1.post_send(SendWR(wr_id=7, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(addr1, 4096, mr1.lkey)],
                         send_flags=e.IBV_SEND_SIGNALED))
    wc = wait_wc(cq1, 'the SEND of the RNR check')
    say('rnr', 'status', wc.status, 'wr_id', wc.wr_id, 'qp-state', qp_state(qp1))
    tell(status=wc.status)

# (2) QP_FATAL at the QP's owner. The plan's rule "fatal" fires at hca1's
# first RDMA READ completion: the QP goes to ERR with QP_FATAL, which the
# kernel delivers to the process owning the QP (ibv_asyncwatch cannot see
# it): this one, through ibv_get_async_event.
cq2 = CQ(ctx, 16)
qp2 = rc_qp(cq2)
buf2, addr2 = mapped(4096)
mr2 = MR(pd, 4096, ACCESS, address=addr2)
if guest == 0:
    buf2[0:4096] = b'\xa5' * 4096
    pair('fatal', qp2, 0x300, rkey=mr2.rkey, addr=addr2)
    hear('fatal done')
else:
    peer = pair('fatal', qp2, 0x400)
    wr = SendWR(wr_id=9, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(addr2, 4096, mr2.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(peer['rkey'], peer['addr'])
    qp2.post_send(wr)
    wc = wait_wc(cq2, 'the RDMA READ of the QP_FATAL check')
    say('fatal', 'read-status', wc.status)

    def alarm(signum, frame):
        fail('no QP_FATAL event in 60 s')
    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(60)
    events = []
    while True:
        try:
            ev = ctx.get_async_event()
        except Exception as err:  # EINTR from the alarm: its handler runs next
            time.sleep(1)
            fail('ibv_get_async_event:', err)
        events.append(ev.event_type)
        ev.ack()
        if ev.event_type == e.IBV_EVENT_QP_FATAL:
            break
    signal.alarm(0)
    say('fatal', 'events', ','.join(map(str, events)), 'qp-state', qp_state(qp2))
    tell(done='fatal')

# (3) A checked transfer across a 2 s blackout. Guest 1 adds a rule from
# inside the guest (hcaemu-faults, over its virtio-serial port) dropping
# every frame after the next 2000, then SENDs 200 messages of 64 KiB
# (64 frames each) with timeout 19 (2.1 s) and retry_cnt 7; a background
# job waits for the first drop, keeps the blackout 2 s and removes the
# rule. Guest 0 checks every byte of every message.
MSG, COUNT, SLOTS = 65536, 200, 16
base = random.Random(2026).randbytes(MSG + 4096)


def message(i):
    off = (i * 7919) % 4096
    return base[off:off + MSG]


BLACKOUT = r'''
import json, subprocess, sys, time


def fired():
    out = subprocess.run(['hcaemu-faults', 'stats'], capture_output=True, text=True).stdout
    return sum(r['fired'] for r in json.loads(out).get('rules') or [] if r['name'] == 'blackout')


end = time.monotonic() + 300
while fired() == 0:
    if time.monotonic() > end:
        print('BLACKOUT never fired', flush=True)
        sys.exit(1)
    time.sleep(0.1)
print('BLACKOUT started', flush=True)
time.sleep(2)  # the blackout's length, not an ordering
print('BLACKOUT dropped-before-rm', fired(), flush=True)
rm = subprocess.run(['hcaemu-faults', 'rm', 'blackout'])
print('BLACKOUT removed', rm.returncode, flush=True)
'''

cq3 = CQ(ctx, 64)
qp3 = rc_qp(cq3, depth=SLOTS)
buf3, addr3 = mapped(MSG * SLOTS)
mr3 = MR(pd, MSG * SLOTS, ACCESS, address=addr3)
if guest == 0:
    for slot in range(SLOTS):
        qp3.post_recv(RecvWR(wr_id=slot, num_sge=1, sg=[SGE(addr3 + slot * MSG, MSG, mr3.lkey)]))
    pair('blackout', qp3, 0x500, timeout=19)
    got, bad, statuses = 0, 0, {}
    end = time.monotonic() + 400
    while got < COUNT:
        if time.monotonic() > end:
            fail('blackout: received', got, 'of', COUNT)
        n, wcs = cq3.poll(1)
        if n == 0:
            continue
        wc = wcs[0]
        statuses[wc.status] = statuses.get(wc.status, 0) + 1
        if wc.status != e.IBV_WC_SUCCESS:
            fail('blackout: receive', got, 'status', wc.status)
        slot = wc.wr_id
        if wc.byte_len != MSG or buf3[slot * MSG:(slot + 1) * MSG] != message(got):
            bad += 1
        got += 1
        qp3.post_recv(RecvWR(wr_id=slot, num_sge=1, sg=[SGE(addr3 + slot * MSG, MSG, mr3.lkey)]))
    say('blackout', 'received', got, 'bad', bad)
    hear('blackout done')
else:
    pair('blackout', qp3, 0x600, timeout=19, retry_cnt=7)
    add = subprocess.run(['hcaemu-faults', 'add',
                          '{"name": "blackout", "action": {"kind": "drop"}, "schedule": {"after": 2000}}'],
                         capture_output=True, text=True)
    say('blackout', 'add', add.returncode, add.stdout.strip(), add.stderr.strip())
    job = subprocess.Popen([sys.executable, '-c', BLACKOUT], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sent = done = 0
    statuses = {}
    t0 = time.monotonic()
    end = t0 + 400
    while done < COUNT:
        if time.monotonic() > end:
            fail('blackout: completed', done, 'of', COUNT)
        while sent < COUNT and sent - done < 8:
            slot = sent % SLOTS
            buf3[slot * MSG:(slot + 1) * MSG] = message(sent)
            qp3.post_send(SendWR(wr_id=sent, opcode=e.IBV_WR_SEND, num_sge=1,
                                 sg=[SGE(addr3 + slot * MSG, MSG, mr3.lkey)], send_flags=e.IBV_SEND_SIGNALED))
            sent += 1
        n, wcs = cq3.poll(1)
        if n == 0:
            continue
        wc = wcs[0]
        statuses[wc.status] = statuses.get(wc.status, 0) + 1
        if wc.status != e.IBV_WC_SUCCESS:
            fail('blackout: send', wc.wr_id, 'status', wc.status)
        done += 1
    took = time.monotonic() - t0
    try:
        out, _ = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        out = 'the blackout job did not end'
    for line in out.splitlines():
        say('blackout', 'job', line)
    stats = subprocess.run(['hcaemu-faults', 'stats'], capture_output=True, text=True).stdout
    say('blackout', 'sent', done, 'statuses', ','.join(f'{k}:{v}' for k, v in sorted(statuses.items())),
        'seconds', f'{took:.1f}', 'rules-left', ','.join(r['name'] for r in json.loads(stats).get('rules') or []))
    tell(done='blackout')
say('END')
