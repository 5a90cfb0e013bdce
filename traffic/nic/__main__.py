"""`python -m traffic.nic CONFIG.json [--log FILE]`: the NIC process (traffic.nic.main)."""

import sys

from traffic.nic.main import main

sys.exit(main())
