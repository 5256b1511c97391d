"""The CPU maze demo behind ``vpo demo``: a tiny Llama, SFT warm-up, RL with GRPO/VPO through
``VPOTrainer``, evaluation with equal answer pools, and a report.

Modules: ``config`` (DemoConfig, --quick), ``format`` (compact prompt/answer format),
``warmup`` (TRL SFTTrainer), ``rl`` (VPOTrainer runs), ``run`` (the resumable pipeline).
Entry point: ``vpo.demo.run.run_demo(DemoConfig(...))``.
"""
