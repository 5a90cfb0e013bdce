"""`python -m emu bench ...`: forward, switch, tdf, speed and friends (`basic`), and the
benches of one subject each (`cluster`, `fuzz` with its `malformed` and `malformed_uet` frames, `lb`,
`train`, `transport`); `benchrun` holds what they share."""
