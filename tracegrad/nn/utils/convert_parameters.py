"""All parameters as one vector and back, as torch.nn.utils.parameters_to_vector."""
from ...autograd import no_grad
from ...tensor import Tensor, cat


def parameters_to_vector(parameters):
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Copy consecutive slices of the 1-D `vec` into the parameters."""
    if not isinstance(vec, Tensor) or vec.ndim != 1:
        raise TypeError(f"expected a 1-D tensor, but got {type(vec).__name__}"
                        + (f" of shape {tuple(vec.shape)}" if isinstance(vec, Tensor) else ""))
    at = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[at:at + n].reshape(p.shape))
            at += n
