"""The book's first worked example (seed 000, Figures 2-2..2-4; docs/FABRIC_FACTS.md "Model
arithmetic"), trained one step with PyTorch autograd.

Inputs X1 = 1, X2 = 0. Hidden H3: weights 0.5, 0.5, bias 0 -> ReLU(0.5) = 0.5;
H4: weights 1, 1, bias 0.5 -> ReLU(1.5) = 1.5. Output O5: W53 = W54 = 1, bias 0.5 ->
ReLU(2.5) = 2.5. Expected output 2: L = (2.5 - 2)^2 = 0.25; dL/dW53 = 2 (Yr - Ye) H3 =
0.5; with learning rate 0.01, W53 becomes 1 - 0.01 x 0.5 = 0.995. Nothing below is
hard-coded but the network and its inputs: the numbers come out of autograd and SGD.
"""

from __future__ import annotations

#: the book's numbers after one step at the default learning rate 0.01 (Fig 2-4)
EXPECTED = {"loss": 0.25, "W53": 0.995}
TOLERANCE = 1e-6


def run(lr: float = 0.01) -> dict:
    """Forward pass, loss, backward pass and one SGD step; returns the book's numbers."""
    import torch

    hidden = torch.nn.Linear(2, 2)
    out = torch.nn.Linear(2, 1)
    with torch.no_grad():
        hidden.weight.copy_(torch.tensor([[0.5, 0.5], [1.0, 1.0]]))  # rows: H3, H4
        hidden.bias.copy_(torch.tensor([0.0, 0.5]))
        out.weight.copy_(torch.tensor([[1.0, 1.0]]))  # W53, W54
        out.bias.copy_(torch.tensor([0.5]))
    x = torch.tensor([[1.0, 0.0]])
    target = torch.tensor([[2.0]])
    h = torch.relu(hidden(x))
    y = torch.relu(out(h))
    loss = torch.nn.functional.mse_loss(y, target)
    opt = torch.optim.SGD(list(hidden.parameters()) + list(out.parameters()), lr=lr)
    opt.zero_grad()
    loss.backward()
    grad_w53 = out.weight.grad[0, 0].item()
    opt.step()
    return {"H3": h[0, 0].item(), "H4": h[0, 1].item(), "output": y.item(),
            "loss": loss.item(), "dL_dW53": grad_w53, "W53": out.weight[0, 0].item(),
            "learning_rate": lr}


def check(r: dict) -> bool:
    """True if a `run()` at the default learning rate gave the book's loss and W53."""
    return all(abs(r[k] - v) < TOLERANCE for k, v in EXPECTED.items())


def describe(r: dict) -> str:
    """The lines `emu run --workload bookexample` prints."""
    return (f"Book example (Figs 2-2..2-4), one training step with torch autograd:\n"
            f"  H3 = {r['H3']:g}, H4 = {r['H4']:g}, output = {r['output']:g}\n"
            f"  L = {r['loss']:g}, dL/dW53 = {r['dL_dW53']:g}, "
            f"W53 = {r['W53']:.4g} (learning rate {r['learning_rate']:g})")
