"""Expert parallelism's exchange: every rank routes a different number of tokens to every
other rank (uneven all_to_all_single), then returns them (all_to_all with tensor lists).

    torchrun --nproc-per-node 8 examples/expert_a2a.py
    sudo python -m emu run rail2x4 --script examples/expert_a2a.py

Tokens are int64 values that say where they come from, so the exchange is checked exactly.
"""
import torch
import torch.distributed as dist


def main() -> bool:
    """The exchange on the initialised default group; True if exact on every rank."""
    rank, world = dist.get_rank(), dist.get_world_size()
    # rank r sends (r + p) % 3 + 1 tokens of width 4 to rank p: uneven, some > others
    send_counts = torch.tensor([(rank + p) % 3 + 1 for p in range(world)], dtype=torch.int64)
    recv_counts = torch.empty(world, dtype=torch.int64)
    dist.all_to_all_single(recv_counts, send_counts)          # who sends me how many
    tokens = torch.cat([torch.full((int(send_counts[p]), 4), rank * 1000 + p,
                                   dtype=torch.int64) for p in range(world)])
    received = torch.empty(int(recv_counts.sum()), 4, dtype=torch.int64)
    dist.all_to_all_single(received, tokens, recv_counts.tolist(), send_counts.tolist())
    expect = torch.cat([torch.full((int(recv_counts[p]), 4), p * 1000 + rank,
                                   dtype=torch.int64) for p in range(world)])
    ok = torch.equal(received, expect) and recv_counts.tolist() == [
        (p + rank) % 3 + 1 for p in range(world)]

    # the way back, as a list of per-rank tensors ("combine")
    back_in = list(received.split(recv_counts.tolist()))
    back_out = [torch.empty(int(c), 4, dtype=torch.int64) for c in send_counts]
    dist.all_to_all(back_out, back_in)
    ok = ok and torch.equal(torch.cat(back_out), tokens)

    flags = torch.tensor([int(ok)], dtype=torch.int64)
    dist.all_reduce(flags)
    if rank == 0:
        print(f"all_to_all_single (uneven) and all_to_all over {world} ranks: "
              f"{flags.item()}/{world} exact")
    return flags.item() == world


if __name__ == "__main__":
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    good = main()
    dist.destroy_process_group()
    raise SystemExit(0 if good else 1)
