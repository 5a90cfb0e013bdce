"""One fabric over several servers (as Mininet keeps its cluster edition in
mininet/cluster/): the servers file (`servers`), the placement of nodes with the fewest
crossing links (`placer`), a plan per server (`plan`), the part each other server runs
(`part`, `python -m emu.cluster.part`) and `net.ClusterNet`, which drives them over SSH
(`remote`, `partclient`) and stands for their nodes here (`proxies`). `emuserver`
emulates a second server in a namespace for the tests."""
