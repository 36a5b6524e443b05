"""tg.optim: optimizers updating parameters in place (SGD, Adam, AdamW, RMSprop, Adagrad) and
learning-rate schedules (tg.optim.lr_scheduler), as torch.optim."""
from ..pytree import register_object
from . import lr_scheduler
from .adam import Adam, AdamW
from .adaptive import Adagrad, RMSprop
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler",
           "register_object"]
