"""The emulated RDMA NIC, one process per GPU NIC (`python -m traffic.nic CONFIG.json`):
its configuration (`nicconfig`), verbs objects and QPs (`nicverbs`), data path
(`datapath`), UET receive path (`uetrx`), control socket and CM (`ctl`, `cm`) and the
client a worker uses (`client`). `main` puts them together."""
