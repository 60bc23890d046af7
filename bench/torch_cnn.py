"""bench/models/cnn.json in PyTorch: bench/compare's reference for `--model cnn`.

Conv2D 32 3x3 ReLU, MaxPool 2, Conv2D 64 3x3 ReLU, MaxPool 2, Flatten,
Dense 128 ReLU, Dense 10 (logits), trained as bench/torch_bench.py says.
PyTorch's layout is NCHW (channels first); --memory-format channels_last
(the default: PyTorch's fastest on the CPU, with oneDNN) stores the same
tensors NHWC, as mpcl does; contiguous keeps them NCHW.

Run by bench/compare inside bench/.venv-torch; not part of the suite.
"""

import torch

import torch_bench

FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}


def cnn():
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 128), nn.ReLU(), nn.Linear(128, 10),
    )


def main():
    def memory_format(ap):
        ap.add_argument("--memory-format", choices=list(FORMATS), default="channels_last")

    a = torch_bench.parse_args(__doc__, memory_format)
    torch_bench.run(a, cnn(), (1, 28, 28), FORMATS[a.memory_format],
                    {"memory_format": a.memory_format})


if __name__ == "__main__":
    main()
