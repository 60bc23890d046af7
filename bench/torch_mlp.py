"""The reference workload for bench/compare: mpcl-train's default run in PyTorch.

784-128-10 MLP with ReLU, trained as bench/torch_bench.py says (mpcl-train's
data, initializers, optimizer and precision policies).

Run by bench/compare inside bench/.venv-torch; not part of the suite.
"""

import torch

import torch_bench


def main():
    a = torch_bench.parse_args(__doc__)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    )
    torch_bench.run(a, model, (784,))


if __name__ == "__main__":
    main()
