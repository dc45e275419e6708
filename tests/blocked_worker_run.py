"""`nanot5-edu` whose streaming data workers block (sleep for an hour) in their second block of rows, as a worker
stuck in a slow read or a full pipe would: torch's own check that the parent is alive never runs then, so only a
worker that asks to die with its parent ends when the trainer is killed. tests/test_robust.py runs this file in place
of `python -m nanot5_edu`."""
import sys
import time

import nanot5_edu.stream as stream

_call = stream.ShuffleCorruptBlock.__call__
_blocks = []


def _second_block_blocks(self, block, indices):
    _blocks.append(indices[0])
    if len(_blocks) > 1:  # in this worker process
        time.sleep(3600)
    return _call(self, block, indices)


stream.ShuffleCorruptBlock.__call__ = _second_block_blocks

if __name__ == "__main__":
    from nanot5_edu.cli import main
    sys.exit(main(sys.argv[1:]))
