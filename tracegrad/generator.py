"""tg.Generator: a random-number generator of its own, for the functions that take `generator=`
(DataLoader's shuffle, random_split, nn.init). Without one they draw from the global generator
that tg.manual_seed seeds."""
import numpy as np

from .core import RNG


class Generator:
    """As torch.Generator: `manual_seed(s)` makes its draws repeatable, independent of tg.manual_seed."""

    def __init__(self, device="cpu"):
        self.device = device
        self.seed()

    def manual_seed(self, seed):
        self._seed = int(seed)
        self.rng = np.random.default_rng(self._seed)
        return self

    def seed(self):
        """Seed from fresh entropy; returns the seed."""
        self.manual_seed(int(np.random.SeedSequence().entropy) % 2 ** 63)
        return self._seed

    def initial_seed(self):
        return self._seed

    def get_state(self):
        return self.rng.bit_generator.state

    def set_state(self, state):
        self.rng.bit_generator.state = state
        return self


def numpy_rng(generator=None):
    """The NumPy generator behind `generator`, or the global one."""
    if generator is None:
        return RNG[0]
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be a tg.Generator, got {type(generator).__name__}")
    return generator.rng
