"""The models of the train workload (issue 15; book ch.8 "Data parallelism").

* `mlp`: the 16-64-64-1 regression MLP the train workload always had (an exact
  single-process reference exists for it).
* `gpt2-small`: the table's GPT-2-small-shaped stack (collectives/compute/data): 12
  pre-norm transformer blocks, d 768, 12 heads, 4 d feed-forward (85,054,464 parameters,
  as measured), on synthetic embeddings - no token embedding or LM head, as the measured
  `xfmr d768 L12` cases. Its gradients are what DDP AllReduces: 170 MB in bf16.
* `xfmr-d2048`: the larger measured shape, d 2048, 4 blocks, 32 heads (201 M parameters,
  402 MB of bf16 gradients).

`Spec` says what the compute model needs: the family of measured figures
(`collectives.compute.gpu`) and how to build the model and a batch of a given shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MLP_IN, MLP_HIDDEN = 16, 64


@dataclass(frozen=True)
class Spec:
    """A model of the train workload: its shape and its measured family."""

    name: str
    d: int = 0          # transformer width (0: the MLP)
    layers: int = 0
    heads: int = 0

    @property
    def family(self) -> str:
        """The family of measured figures (gpu.family_name), "mlp" for the MLP."""
        return f"xfmr d{self.d} L{self.layers}" if self.d else "mlp"

    def build(self, seed: int = 0) -> torch.nn.Module:
        """The model with weights from `seed` (on the current default device)."""
        torch.manual_seed(seed)
        if not self.d:
            return torch.nn.Sequential(torch.nn.Linear(MLP_IN, MLP_HIDDEN), torch.nn.ReLU(),
                                       torch.nn.Linear(MLP_HIDDEN, MLP_HIDDEN), torch.nn.ReLU(),
                                       torch.nn.Linear(MLP_HIDDEN, 1))
        layer = torch.nn.TransformerEncoderLayer(self.d, self.heads, 4 * self.d, dropout=0.0,
                                                 activation="gelu", batch_first=True,
                                                 norm_first=True)
        return torch.nn.TransformerEncoder(layer, self.layers, enable_nested_tensor=False)

    def batch(self, it: int, size: int, seq: int, seed: int = 1) -> tuple[torch.Tensor,
                                                                          torch.Tensor]:
        """Global batch `it` (inputs, targets), the same on every rank (fixed seed);
        `seq` tokens per sample for a transformer."""
        g = torch.Generator().manual_seed(seed * 100_003 + it)
        if not self.d:
            w = torch.linspace(-1, 1, MLP_IN)
            x = torch.randn(size, MLP_IN, generator=g)
            return x, torch.sin(x @ w).unsqueeze(1) + 0.05 * torch.randn(size, 1, generator=g)
        x = torch.randn(size, seq, self.d, generator=g)
        return x, torch.roll(x, 1, dims=1)  # learn to shift the sequence by one token

    def params(self) -> int:
        """Parameter count (built on the meta device)."""
        with torch.device("meta"):
            return sum(p.numel() for p in self.build().parameters())


MODELS = {"mlp": Spec("mlp"), "gpt2-small": Spec("gpt2-small", 768, 12, 12),
          "xfmr-d2048": Spec("xfmr-d2048", 2048, 4, 32)}
