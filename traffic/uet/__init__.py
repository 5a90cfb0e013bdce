"""The Ultra Ethernet Transport as pure state machines (issue 16; docs/UET.md; the seed 004): RUD and ROD packet delivery over PDCs set up on the fly
(`initiator`, `target`), NSCC congestion control (`nscc`), entropy selection for
spraying (`ev`), both halves of one emu endpoint behind the RC transport's interface
(`endpoint`). docs/UET.md."""
