"""`nanot5-edu` with a loss scaler that moves within a short run: it starts at 2**12 and grows after every 4 good
steps (instead of 2,000), backing off when the scaled gradients overflow. A resume that forgets the scaler's state
restarts at 2**12 and takes other steps than the uninterrupted run: tests/test_robust.py runs this file in place of
`python -m nanot5_edu`."""
import sys

import torch

_init = torch.amp.GradScaler.__init__


def _moving_scaler(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                   growth_interval=2000, enabled=True):
    _init(self, device, init_scale=2.0 ** 12, growth_factor=growth_factor, backoff_factor=backoff_factor,
          growth_interval=4, enabled=enabled)


torch.amp.GradScaler.__init__ = _moving_scaler

if __name__ == "__main__":
    from nanot5_edu.cli import main
    sys.exit(main(sys.argv[1:]))
