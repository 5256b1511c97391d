"""Which device the demo ran on, and what its report says about it and about the paper's setting.

Usage::

    from vpo.demo.device import device_record, describe_setting
    describe_setting(metrics, cfg, device_record(cfg.torch_device()))   # after build_metrics
"""

from __future__ import annotations

from typing import Any

from vpo.demo.config import DemoConfig


def device_record(device: str) -> dict[str, Any]:
    """{"device": "cuda" | "cpu", "name": what the report calls it, "torch": torch's version}; the
    GPU's name comes from torch (e.g. "NVIDIA H100 80GB HBM3")."""
    import torch

    record: dict[str, Any] = {"device": device, "torch": torch.__version__}
    if device.startswith("cuda"):
        record["name"] = torch.cuda.get_device_name(torch.device(device))
        record["cuda"] = torch.version.cuda
    else:
        record["name"] = "CPU"
    return record


def paper_setting(cfg: DemoConfig) -> bool:
    """Whether this run evaluates on the paper's own test mazes (size 9, the "paper" protocol)."""
    from vpo.tasks.maze.generator import default_protocol

    return default_protocol(cfg.size) == "paper" and cfg.size == 9


def describe_setting(metrics: dict[str, Any], cfg: DemoConfig, device: dict[str, Any]) -> None:
    """Name the device in the report's title, set-up and notes (``metrics`` from
    ``vpo.demo.results.build_metrics``, changed in place); on the paper's 9x9 mazes, say so
    beside the paper's best@30 table instead of calling the settings different."""
    params = metrics.get("warmup", {}).get("params")
    size = f"a {params / 1e6:.1f}M-parameter Llama" if params and params >= 1e6 else "a tiny Llama"
    metrics["title"] = f"VPO maze demo: {size} on {device['name']}"
    metrics["device"] = device
    ran_on = (f"Ran on {device['name']} (torch {device['torch']}"
              + (f", CUDA {device['cuda']})" if device.get("cuda") else ")") + ", float32 weights.")
    metrics.setdefault("notes", []).insert(0, ran_on)
    if cfg.preset != "none":
        metrics["notes"].insert(1, f"Preset {cfg.preset!r}" + (" with --quick: its smoke-test size, so the numbers "
                                                                "check the pipeline, not the methods."
                                                                if cfg.quick else "."))
    if not paper_setting(cfg) or not metrics.get("comparison"):
        return
    comparison = metrics["comparison"]
    comparison["caption"] = (
        f"This demo on the paper's own mazes: RL on its 1,000 train mazes, best@{cfg.pool} on the first "
        f"{cfg.eval_examples} of its 100 test mazes (9x9, {cfg.reward_mode} reward, m = {cfg.answers}), mean over "
        f"{cfg.seeds} seed(s), on {device['name']}. The mazes and the metric are the paper's"
        + ("" if (cfg.pool, cfg.eval_examples) == (30, 100) else
           " (the paper's own evaluation: best@30 on all 100 test mazes, as the preset without --quick does)")
        + f"; the model is not: {size} built from a config and warmed up on random walks, where the paper "
        "starts from Qwen3-4B, so the absolute values differ and the comparison is the methods' order and the "
        "diversity gap.")
