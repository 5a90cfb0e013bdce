"""emu.bench.niccpu: a sample's bucket from its call chain, perf script's parsing, the
floor program's output line (pure, exact)."""

import pytest

from emu.bench import niccpu as N

K = "[kernel.kallsyms]"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
PY = "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"


def _chain(*syms, user=(("__send", LIBC),)):
    return [(s, K) for s in syms] + list(user)


@pytest.mark.parametrize("frames, want", [
    # a send whose softirq delivers the frame into the peer namespace (veth -> backlog)
    (_chain("packet_rcv", "__netif_receive_skb_core", "process_backlog", "net_rx_action",
            "handle_softirqs", "do_softirq", "veth_xmit", "__dev_queue_xmit", "packet_snd",
            "__sys_sendto", "__x64_sys_sendto", "do_syscall_64"), "kernel: send, peer's receive"),
    (_chain("_copy_from_iter", "packet_snd", "__sys_sendto", "__x64_sys_sendto"),
     "kernel: send, own"),
    (_chain("finish_task_switch.isra.0", "__schedule", "schedule_hrtimeout_range",
            "do_select", "__x64_sys_pselect6"), "kernel: wait, context switch"),
    (_chain("fdget", "do_select", "__x64_sys_pselect6"), "kernel: wait, call"),
    (_chain("skb_copy_datagram_iter", "packet_recvmsg", "__x64_sys_recvmsg"), "kernel: recv"),
    (_chain("futex_wake", "__x64_sys_futex"), "kernel: futex"),
    (_chain("unmap_page_range", "__x64_sys_munmap"), "kernel: other call (munmap)"),
    # leaf first: an interrupt taken inside a system call is the interrupt's
    (_chain("rcu_core", "handle_softirqs", "__irq_exit_rcu", "sysvec_apic_timer_interrupt",
            "asm_sysvec_apic_timer_interrupt", "packet_snd", "__x64_sys_sendto"),
     "kernel: interrupt"),
    (_chain("clear_page_erms", "do_anonymous_page", "exc_page_fault", "asm_exc_page_fault",
            user=(("memcpy", LIBC),)), "kernel: page fault"),
    # the compiler folded __x64_sys_recvmsg into do_syscall_64: the inner name counts
    (_chain("_copy_to_iter", "packet_recvmsg", "__sys_recvmsg", "do_syscall_64"), "kernel: recv"),
    (_chain("finish_task_switch.isra.0", "__schedule", "schedule", "exit_to_user_mode_loop",
            "do_syscall_64"), "kernel: return to user"),
    (_chain("do_syscall_64", "entry_SYSCALL_64_after_hwframe"), "kernel: call entry"),
    (_chain("ret_from_fork", user=()), "kernel: other"),
    ([("_PyEval_EvalFrameDefault", PY)], "user: interpreter"),
    ([("main", "/root/.pyenv/versions/3.11.7/bin/python3.11")], "user: interpreter"),
    ([("nic_step", "/x/traffic/fast/_nicstep.cpython-311-x86_64-linux-gnu.so")],
     "user: NIC C modules"),
    ([("rc_on_write", "/x/traffic/fast/_rc.cpython-311-x86_64-linux-gnu.so")],
     "user: NIC C modules"),
    ([("select_select", "/x/lib-dynload/select.cpython-311-x86_64-linux-gnu.so")],
     "user: CPython extensions"),
    ([("__memmove_avx_unaligned_erms", LIBC)], "user: libc"),
    ([("__vdso_clock_gettime", "[vdso]")], "user: vdso"),
    ([("[unknown]", "[unknown]")], "user: other"),
    ([], "unknown"),
])
def test_a_sample_goes_to_the_bucket_its_chain_names(frames, want):
    assert N.classify(frames) == want


SCRIPT = """python 101/102    1000000 
\tffffffff81e80de0 __x64_sys_sendto+0x20 ([kernel.kallsyms])
\t          10ab59 __send (/usr/lib/x86_64-linux-gnu/libc.so.6)

nic 101/101    2000000 
\t          20e009 _PyEval_EvalFrameDefault (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)
\t    7f1ef8c61860 [unknown] ([unknown])
"""


def test_perf_script_parses_to_samples_leaf_first():
    got = list(N.parse_script(SCRIPT))
    assert got == [
        (101, 102, 1000000, [("__x64_sys_sendto", K), ("__send", LIBC)]),
        (101, 101, 2000000, [("_PyEval_EvalFrameDefault", PY), ("[unknown]", "[unknown]")]),
    ]
    s = N.split_of(SCRIPT)
    assert dict(s.buckets[101]) == {"kernel: send, own": 1000000, "user: interpreter": 2000000}
    assert dict(s.threads[101]) == {102: 1000000, 101: 2000000}


def test_the_floor_line_parses_to_its_fields():
    line = ("frames 1204 cpu_us_per_frame 35.67 late_mean_us 105.4 late_p99_us 591.4 "
            "nvcsw 1196 nivcsw 50 rx 0")
    assert N.parse_floor(line) == {"frames": 1204, "cpu_us_per_frame": 35.67,
                                   "late_mean_us": 105.4, "late_p99_us": 591.4, "nvcsw": 1196,
                                   "nivcsw": 50, "rx": 0}


def test_the_report_puts_all_nics_cpu_over_all_data_frames():
    res = {"tdf": 5000, "rc": 0, "fidelity": {"kept_up": True, "p99_lag_model_us": 0.5,
                                              "worst": "h1g1 (pacer)"},
           "cpu": {"nics": {"cpu_s": 3.0, "cores": 1.0}},
           "nics": {"h1g1": {"data_frames": 1990, "sampled_ns": {"user: interpreter": 3000000,
                                                                 "kernel: send, own": 1000000}},
                    "h1g2": {"data_frames": 10, "sampled_ns": {"user: interpreter": 4000000}}}}
    out = N.report(res)
    assert "data frames 2000; sampled 0.01 s = 4.0 us/data frame" in out
    assert "| user: interpreter | 3.5 | 87.5 % |" in out
    assert "| kernel: send, own | 0.5 | 12.5 % |" in out
    assert out.endswith("groups: interpreter 87.5 %, kernel 12.5 %")
