"""The five matched workloads (SmolLM2-135M, the SmolVLA action expert, a scaled SD U-Net,
ResNet-50, the Whisper-tiny encoder) at full or ci scale. Parameters carry Hugging Face
(torchvision for ResNet-50) names, so published checkpoints load with Session.load_weights."""
from ._meganeura import workloads as _workloads

Workload = _workloads.Workload
list = _workloads.list  # noqa: A001  (the workload list, as `meganeura models` prints it)
build = _workloads.build
parameter_count = _workloads.parameter_count
special_init = _workloads.special_init

__all__ = ["Workload", "list", "build", "parameter_count", "special_init"]
