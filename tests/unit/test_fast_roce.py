"""RoCEv2 framing in C (emucore/wire/fast/roce.c) against its Python reference
(emucore.wire.templates, emucore.wire.roce): the same bytes for every opcode, address,
QP, PSN, length 0..MTU (every pad), ECN and DSCP; the same parse, ICRC and checksum
verdicts on good, corrupted and cut frames; the same errors; also under ASan + UBSan."""

import os
import random
import subprocess
import sys

import pytest

from emucore import cbuild, framing
from emucore.wire import fast, roce, templates
from emucore.wire.ib import AETH_OPS, IMM_OPS, RETH_OPS, Op

MTU = 4096


def rand_template(rng):
    """The same template twice (Python, C) with random addresses, QP, P_Key, DSCP, TTL."""
    mac = [bytes(rng.randrange(256) for _ in range(6)) for _ in range(2)]
    ip = [".".join(str(rng.randrange(256)) for _ in range(4)) for _ in range(2)]
    kw = dict(pkey=rng.randrange(1 << 16), dscp=rng.randrange(64), ecn=rng.randrange(4),
              ttl=rng.randrange(256))
    args = (mac[0], mac[1], ip[0], ip[1], rng.randrange(1 << 16), rng.randrange(1 << 24))
    return templates.FrameTemplate(*args, **kw), fast.FrameTemplate(*args, **kw)


def rand_length(rng):
    """Payload lengths 0..MTU, weighted to the pad cases and the ends."""
    return rng.choice([rng.randrange(8), MTU - rng.randrange(8), rng.randrange(MTU + 1)])


def rand_build(rng):
    """Arguments of one FrameTemplate.build: any opcode with its extension headers."""
    op = rng.choice(list(Op))
    kw = dict(ackreq=rng.random() < 0.5, becn=rng.random() < 0.3,
              payload=rng.randbytes(rand_length(rng)) if op != Op.CNP or rng.random() < 0.5
              else b"")
    if op in RETH_OPS:
        kw["reth"] = (rng.randrange(1 << 64), rng.randrange(1 << 32), rng.randrange(1 << 32))
    if op in IMM_OPS:
        kw["imm"] = rng.randrange(1 << 32)
    if op in AETH_OPS:
        kw["aeth"] = (rng.randrange(256), rng.randrange(1 << 24))
    if rng.random() < 0.3:
        kw["ecn"] = rng.randrange(4)
    if rng.random() < 0.3:
        kw["dscp"] = rng.randrange(64)
    if rng.random() < 0.3:
        kw["payload"] = memoryview(bytearray(kw["payload"]))
    psn = rng.choice([rng.randrange(1 << 24), (1 << 24) - 1, rng.randrange(1 << 40)])
    return int(op), psn, kw


def corrupt(rng, frame):
    """A frame changed as the fuzzer and the wire do: a flipped byte (headers, payload or
    ICRC), cut, Ethernet padding, an 802.1Q tag, IPv4 options, a UDP checksum."""
    f = bytearray(frame)
    kind = rng.randrange(7)
    if kind == 0:
        f[rng.randrange(len(f))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        f[rng.randrange(min(len(f), 58))] = rng.randrange(256)
    elif kind == 2:
        del f[rng.randrange(len(f)):]
    elif kind == 3:
        f += bytes(rng.randrange(1, 20))
    elif kind == 4:
        f[12:12] = b"\x81\x00" + rng.randbytes(2)
    elif kind == 5:  # IPv4 options: IHL 6, lengths right, checksum stale unless fixed
        f[14] = 0x46
        f[34:34] = rng.randbytes(4)
        f[16:18] = (int.from_bytes(f[16:18], "big") + 4).to_bytes(2, "big")
    else:
        f[40:42] = rng.randbytes(2)
    return bytes(f)


def same_fields(got, want):
    """Equal RoceFields (the payload views by content, and both views of the frame)."""
    assert got == want
    if want is not None:
        assert type(got) is templates.RoceFields and type(got.payload) is memoryview
        assert got.payload.obj is want.payload.obj


def check_frame(frame):
    """parse (all verify flags), malformed, icrc_of and icrc_reference agree on `frame`."""
    for buf in (frame, bytearray(frame), memoryview(bytearray(frame))[:]):
        for vi in (False, True):
            for vc in (False, True):
                same_fields(fast.parse(buf, verify_icrc=vi, verify_csum=vc),
                            templates.parse(buf, verify_icrc=vi, verify_csum=vc))
        assert fast.malformed(buf) is templates.malformed(buf)
    assert_same_outcome(fast.icrc_reference, roce.icrc_reference, frame)
    assert_same_outcome(fast.icrc_of, roce.icrc_of, frame)


def assert_same_outcome(c_fn, py_fn, *args, **kw):
    """Both return the same value or both raise the same exception type."""
    try:
        want = py_fn(*args, **kw)
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        with pytest.raises(type(e)):
            c_fn(*args, **kw)
        return
    assert c_fn(*args, **kw) == want


def run_differential(cases, seed=30):
    """`cases` random frames built by both, checked, then corrupted and checked."""
    rng = random.Random(seed)
    for i in range(cases):
        if i % 16 == 0:
            tp, tc = rand_template(rng)
        op, psn, kw = rand_build(rng)
        want = tp.build(op, psn, **kw)
        got = tc.build(op, psn, **kw)
        assert got == want, (op, psn, kw)
        assert fast.icrc_reference(got) == fast.icrc_of(got) == roce.icrc_of(want)
        check_frame(want)
        check_frame(corrupt(rng, want))
    for n in range(64):  # every short frame, and every cut of one whole frame
        check_frame(want[:n])
    assert tc.build_cnp() == tp.build_cnp()


def test_build_and_parse_equal_the_python_on_random_frames():
    run_differential(1500)


def test_the_book_frames_match_scapy_too():
    tc = fast.FrameTemplate("02:00:00:00:01:01", "02:00:00:00:02:01", "10.0.1.11", "10.0.2.12",
                            roce.udp_sport(0x17, 0x123456), 0x123456, pkey=0x8012)
    data = bytes(range(256)) * 16
    reth = (0x7F0000001000, 0x1234, 3 * MTU)
    assert tc.build(Op.WRITE_FIRST, 0xABC, True, reth, payload=data) == bytes(
        tc.scapy(Op.WRITE_FIRST, 0xABC, ackreq=True, reth=reth, payload=data))
    assert tc.build(Op.ACK, 0xABC, aeth=(0x60, 7)) == bytes(tc.scapy(Op.ACK, 0xABC,
                                                                     aeth=(0x60, 7)))


@pytest.mark.parametrize("args,kw", [
    ((256, 0), {}), ((-1, 0), {}), ((7, "x"), {}),
    ((7, 0), {"reth": (1 << 64, 0, 0)}), ((7, 0), {"reth": (0, 0)}),
    ((7, 0), {"imm": 1 << 32}), ((7, 0), {"imm": -1}), ((7, 0), {"aeth": (256, 0)}),
    ((7, 0), {"aeth": (0, 1 << 32)}), ((7, 0), {"aeth": (0,)}), ((7, 0), {"dscp": 64}),
    ((7, 0), {"ecn": 256}), ((7, 0), {"dscp": -1}), ((7, 0), {"payload": bytes(65500)}),
    ((7, 0), {"payload": "text"}), ((7, 0), {"colour": 1}), ((7,), {}),
])
def test_bad_arguments_fail_alike(args, kw):
    t = [cls("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 0xC000, 5)
         for cls in (templates.FrameTemplate, fast.FrameTemplate)]
    assert_same_outcome(t[1].build, t[0].build, *args, **kw)


def test_the_datapath_is_chosen_explicitly(monkeypatch):
    assert framing.select("python") is templates and framing.select("fast") is fast
    assert framing.select("auto") is fast  # the C framing implements every frame
    with pytest.raises(ValueError, match="EMU_DATAPATH"):
        framing.select("quick")
    assert framing.DATAPATH == ("python" if os.environ.get("EMU_DATAPATH") == "python"
                                else "fast")
    code = ("import sys; sys.modules['emucore.wire.fast._roce'] = None\n"
            "import emucore.framing")
    env = {**os.environ, "EMU_DATAPATH": "fast"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=cbuild.ROOT)
    assert r.returncode != 0 and "run ./setup.sh" in r.stderr, r.stderr
    env["EMU_DATAPATH"] = "python"
    r = subprocess.run([sys.executable, "-c", code + "; print(emucore.framing.DATAPATH)"],
                       capture_output=True, text=True, env=env, cwd=cbuild.ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "python", r.stderr


SANITIZED_CHILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("emucore.wire.fast._roce", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
sys.modules["emucore.wire.fast._roce"] = mod
from emucore.wire import fast
assert fast._roce is mod
from tests.unit.test_fast_roce import run_differential
run_differential(int(sys.argv[2]))
print("ok", mod.CLMUL)
"""


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory):
    out = tmp_path_factory.mktemp("asan")
    return cbuild.build(fast.MODULE, sanitize=True, out_dir=out), cbuild.sanitized_env(out)


@pytest.mark.parametrize("tables", [False, True], ids=["clmul-if-any", "tables"])
def test_the_differential_runs_clean_under_asan_and_ubsan(sanitized, tables):
    """Both CRC-32 implementations (PCLMULQDQ where the CPU has it; the tables forced)."""
    so, env = sanitized
    env = {**env, "EMU_CRC32_TABLES": "1"} if tables else env
    r = subprocess.run([sys.executable, "-c", SANITIZED_CHILD, str(so), "300"],
                       capture_output=True, text=True, env=env, cwd=cbuild.ROOT, timeout=600)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stderr[-4000:]
    if tables:
        assert r.stdout.split() == ["ok", "0"]
