"""Lab workloads that drive the emulated fabric (RDMA writes, incast, later collectives)."""
