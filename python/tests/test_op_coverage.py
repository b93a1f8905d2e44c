"""Every op declared in C++ (src/core/ops/) is reachable from Python, or is one that only
autodiff, the optimizer or the rewrite passes create: the module lists the declared ops
(`_ops()`), so an op added in C++ without a Python builder fails here, named. The plain unary
and binary builders are bound from the declarations themselves; each must also have a NumPy
reference in test_builders.py, so a new one is checked numerically, not only bound."""
import meganeura as mn
from meganeura import _meganeura

import test_builders

# Ops whose builder has another name (one builder choosing among ops by an argument).
BUILDER_OF = {"gelu_erf": "gelu", "gelu_tanh": "gelu", "gelu_erf_grad": "gelu_grad", "gelu_tanh_grad": "gelu_grad",
              "attention_fused": "attention"}
# Kinds no user builds: leaves (Graph.input, .parameter, ...), gradients-only ops, fused programs.
INTERNAL_GRADS = {"leaf", "backward_only", "fused"}
INTERNAL_FAMILIES = {"leaf", "optim", "fused"}
# Backward ops that autodiff builds and that have a vjp of their own (for second derivatives).
AUTODIFF_BUILT = {"embedding_backward", "gather_backward"}


def user_facing():
    return [(name, family) for name, family, grad in _meganeura._ops()
            if grad not in INTERNAL_GRADS and family not in INTERNAL_FAMILIES and name not in AUTODIFF_BUILT]


def test_the_op_list_is_the_declared_one():
    ops = {name: (family, grad) for name, family, grad in _meganeura._ops()}
    assert len(ops) == len(_meganeura._ops()), "an op is listed twice"
    assert ops["matmul"] == ("linalg", "vjp") and ops["input"] == ("leaf", "leaf")
    assert ops["conv2d_backward_input"][1] == "backward_only"
    for name in [*BUILDER_OF, *AUTODIFF_BUILT]:
        assert name in ops, f"{name} is named here but is no longer a declared op"
    for name in AUTODIFF_BUILT:
        assert name.endswith("_backward") and ops[name][1] == "vjp", name


def test_every_user_facing_op_has_a_python_builder():
    missing = [name for name, _ in user_facing() if not callable(getattr(mn, BUILDER_OF.get(name, name), None))]
    assert not missing, f"ops declared in C++ with no Python builder: {', '.join(missing)}"


def test_every_elementwise_builder_has_a_numpy_reference():
    references = {**test_builders.UNARY, **test_builders.POSITIVE, **test_builders.BINARY}
    checked_elsewhere = {"gelu_erf", "gelu_tanh", "gelu_erf_grad", "gelu_tanh_grad", "affine", "cast", "clip_coef",
                         "where"}  # test_builders' gelu, affine/cast/clip_coef and where tests
    missing = [name for name, family in user_facing()
               if family in ("unary", "binary") and name not in references and name not in checked_elsewhere]
    assert not missing, f"elementwise ops without a NumPy reference in test_builders.py: {', '.join(missing)}"
