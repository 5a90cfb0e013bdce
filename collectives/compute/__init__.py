"""A GPU compute model for emu's CPU workers (issue 15, `--gpu h100`): what a forward and
backward pass would cost on a real GPU (`gpu`), counted with torch's FlopCounterMode
(`meter`), spent in model time while the worker sleeps (`clock`), so that a step shows
its compute, its communication and their overlap (`split`). docs/COMPUTE.md."""
