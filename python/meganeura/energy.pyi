"""`meganeura energy predict|recommend|fit` as functions: each flag a keyword (dashes as underscores), the
command's JSON report as a dict. A keyword left None keeps the command's default."""
from typing import Any, Optional, Sequence, Union

def predict(*, family: Optional[str] = None, method: Optional[str] = None, layers: Optional[int] = None,
            hidden: Optional[int] = None, heads: Optional[int] = None, ff: Optional[int] = None,
            vocab: Optional[int] = None, batch: Optional[float] = None, seq: Optional[float] = None,
            tokens: Optional[float] = None, grad_accum: Optional[int] = None, dtype: Optional[str] = None,
            gpus: Optional[int] = None, strategy: Optional[str] = None, pcie: Optional[bool] = None,
            tp_scheme: Optional[str] = None, power_limit: Optional[float] = None,
            efficiency: Optional[float] = None, gpu: Optional[str] = None, model: Optional[str] = None,
            workload: Optional[str] = None, steps: Optional[float] = None, tokens_per_step: Optional[float] = None,
            grid: Optional[float] = None, hardware: Optional[str] = None, svg: Optional[str] = None) -> dict[str, Any]: ...

def recommend(*, family: Optional[str] = None, layers: Optional[int] = None, hidden: Optional[int] = None,
              heads: Optional[int] = None, ff: Optional[int] = None, vocab: Optional[int] = None,
              batch: Optional[float] = None, batches: Optional[Sequence[float]] = None, seq: Optional[float] = None,
              tokens: Optional[float] = None, grad_accum: Optional[int] = None, dtype: Optional[str] = None,
              gpus: Optional[int] = None, strategy: Optional[str] = None, pcie: Optional[bool] = None,
              tp_scheme: Optional[str] = None, gpu: Union[str, Sequence[str], None] = None,
              step: Optional[float] = None, hardware: Optional[str] = None,
              svg: Optional[str] = None) -> dict[str, Any]: ...

def fit(csv: str, *, model: Optional[str] = None, folds: Optional[int] = None, vocab: Optional[int] = None,
        test: Optional[str] = None, min_gpu_runs: Optional[int] = None, out: Optional[str] = None,
        hardware: Optional[str] = None, save: Optional[bool] = None) -> dict[str, Any]: ...
