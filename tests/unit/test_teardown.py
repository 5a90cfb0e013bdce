"""A fabric's teardown (emu.realise.nodes.stop_mininet): every node's shell ended, no
interface deleted one by one - the veths go with the namespaces (nsutil.clean right after,
one kernel batch; Mininet's stop spent ~28 ms a veth, issue 30)."""

from types import SimpleNamespace

from emu.realise.nodes import stop_mininet


def test_mininet_stops_without_deleting_each_veth():
    calls = []

    class Node:
        def __init__(self, name):
            self.name = name

        def stop(self, deleteIntfs=True):  # noqa: N803 (Mininet API)
            calls.append((self.name, "stop", deleteIntfs))

        def terminate(self):
            calls.append((self.name, "terminate"))

    class Link:
        def stop(self):
            calls.append("link stop")

    net = SimpleNamespace(switches=[Node("rail1"), Node("fe")], hosts=[Node("h1")],
                          links=[Link()])
    stop_mininet(net)
    assert calls == [("rail1", "stop", False), ("rail1", "terminate"),
                     ("fe", "stop", False), ("fe", "terminate"), ("h1", "terminate")]
