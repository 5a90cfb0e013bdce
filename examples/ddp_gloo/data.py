"""The training data of train.py: a seeded synthetic regression task (a module beside the
script, imported the way a project's own modules are)."""
import torch

IN = 8


def batch(step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch `step`: y = x . w + noise, the same on every rank."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, IN, generator=g)
    w = torch.linspace(-1.0, 1.0, IN)
    return x, (x @ w).unsqueeze(1) + 0.01 * torch.randn(size, 1, generator=g)
