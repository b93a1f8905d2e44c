"""Energy prediction, power-limit recommendation and fitting: `meganeura energy predict|recommend|fit` with the same options (each flag
a keyword, dashes as underscores) returning the same JSON report as a dict."""
from ._meganeura import energy as _energy

predict = _energy.predict
recommend = _energy.recommend
fit = _energy.fit

__all__ = ["predict", "recommend", "fit"]
