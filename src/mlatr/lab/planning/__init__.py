"""Planning a GPU run without a GPU: trace one training step on fake tensors, account its memory and FLOPs.

:mod:`~mlatr.lab.planning.tracker` counts the bytes of every tensor storage a step creates, from its creation to
its release (the same accounting for a fake trace and for a real run); :mod:`~mlatr.lab.planning.architectures`
builds a config's encoders at full size without weights; :mod:`~mlatr.lab.planning.step_trace` runs the trainer's
own step on them; :mod:`~mlatr.lab.planning.gpu_plan` turns traces into the plan ``mlatr plan`` prints (memory by
part, FLOPs, a time lower bound, the largest batch that fits, the cheapest option set that fits).
"""
