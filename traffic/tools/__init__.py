"""Traffic tools beside the NIC: a raw-frame generator honouring PFC (`rawgen`), N DCQCN
senders on one ideal port in model time (`bottleneck`) and the host's LLDP/DCBX speaker
(`lldp_host`)."""
