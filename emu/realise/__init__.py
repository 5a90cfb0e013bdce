"""Realising a fabric on this machine: namespaces, links, addresses and routes (netlink),
the switch agents and RDMA NICs as processes, and what a crashed run left behind.

`net.FabricNet` is the entry: it builds what `netplan` plans from a topology, with
Mininet nodes (`nodes`), pyroute2 (`netlink`), the processes (`procs`, `nics`) and the
load-balancing plan of each switch (`lbplan`). `nodeops` changes a live node (faults),
`tunnel` carries a link to another server (VXLAN)."""
