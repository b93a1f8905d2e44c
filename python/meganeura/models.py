"""Built-in models: a multilayer perceptron with its synthetic classification set, and a
character-level transformer with its built-in corpus."""
from ._meganeura import models as _models

mlp = _models.mlp
synthetic_classification = _models.synthetic_classification
chargpt = _models.chargpt
builtin_text = _models.builtin_text

__all__ = ["mlp", "synthetic_classification", "chargpt", "builtin_text"]
