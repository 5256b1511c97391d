"""vLLM as the sampler of ``vpo eval --backend vllm`` and ``vpo search best-of-n --backend vllm``:
answer pools at the paper's scale (300 prompts x 30 answers of up to 2,048 tokens) on a GPU.

Usage::

    from vpo.sampling.vllm import VLLMSampler
    sampler = VLLMSampler("runs/vpo", tokenizer, dtype="bfloat16")     # vllm.LLM on the folder
    rows = sampler.generate(prompts, temperature=0.7, top_p=1.0, max_new_tokens=2048, seed=0)

Prompts are encoded by the checkpoint's own tokenizer (``vpo.models.checkpoint_tokenizer``),
exactly as the transformers backend encodes them, and handed to vLLM as token ids, so both
backends see the same prompt (chat template included). The chains of an example that share
one prompt are one request with ``n`` = chains; an example whose chains have different prompts
(the demo's goal-conditioned format) sends one request per chain. Each request is seeded from
(seed, example) or (seed, example, chain) (``vpo.sampling.chain_seed``), so a pool is
reproducible for a seed and a vLLM version; it is not the transformers backend's pool.
Only the sampling settings given are used (temperature, top-p, no top-k): a checkpoint's own
``generation_config.json`` (e.g. a repetition penalty) does not apply here, as it does under hf.

Needs ``pip install 'vpo[vllm]'`` and a CUDA GPU; ``vpo.sampling.check_vllm`` says so before
anything loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vpo.sampling import Generation, chain_seed, check_sampling, completion_ids, finish_chain


def plan_requests(prompts: Sequence[Sequence[str]]) -> list[tuple[int, list[int], tuple[int, ...]]]:
    """One (example g, chains [c...], seed key) per vLLM request: an example's chains form one
    request (key (g,)) when they share a prompt, else one request per chain (key (g, c))."""
    plan: list[tuple[int, list[int], tuple[int, ...]]] = []
    for g, row in enumerate(prompts):
        if len(set(row)) == 1:
            plan.append((g, list(range(len(row))), (g,)))
        else:
            plan.extend((g, [c], (g, c)) for c in range(len(row)))
    return plan


def read_completion(token_ids: Sequence[int], finish_reason: str | None, tokenizer: Any) -> Generation:
    """A vLLM completion as a ``Generation``: cut at EOS and stripped of padding as the
    transformers backend does (``finish_chain``), decoded by the same tokenizer; truncated
    when vLLM stopped on the length limit."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids, _ = finish_chain(token_ids, tokenizer.eos_token_id, pad_id)
    truncated = finish_reason == "length"
    return Generation(tokenizer.decode(ids, skip_special_tokens=True), len(ids), truncated,
                      completion_ids(ids, truncated, tokenizer.eos_token_id))


class VLLMSampler:
    """``vpo.sampling.Sampler`` over ``vllm.LLM(model=folder, dtype=dtype)``.

    ``tokenizer``: the checkpoint's tokenizer (prompts are encoded with it; completions are
    decoded with it). ``engine_args``: further ``vllm.LLM`` keyword arguments (e.g.
    ``gpu_memory_utilization``, ``max_model_len``).
    """

    def __init__(self, model: str | Path, tokenizer: Any, *, dtype: str = "bfloat16", **engine_args: Any) -> None:
        from vllm import LLM

        self.tokenizer = tokenizer
        self.llm = LLM(model=str(model), tokenizer=str(model), dtype=dtype, **engine_args)

    def generate(self, prompts: Sequence[Sequence[str]], *, temperature: float, top_p: float,
                 max_new_tokens: int, seed: int, progress: bool = False,
                 desc: str = "sampling") -> list[list[Generation]]:
        from vllm import SamplingParams

        check_sampling(temperature, top_p, max_new_tokens)
        plan = plan_requests(prompts)
        stop = [self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else None
        requests = [{"prompt_token_ids": self.tokenizer(prompts[g][chains[0]])["input_ids"]} for g, chains, _ in plan]
        params = [SamplingParams(n=len(chains), temperature=temperature, top_p=top_p, max_tokens=max_new_tokens,
                                 seed=int(chain_seed(seed, *key).generate_state(1)[0]),
                                 stop_token_ids=stop)
                  for _, chains, key in plan]
        results = self.llm.generate(requests, params, use_tqdm=progress)
        out: list[list[Any]] = [[None] * len(row) for row in prompts]
        for (g, chains, _), result in zip(plan, results, strict=True):
            for c, completion in zip(chains, result.outputs, strict=True):
                out[g][c] = read_completion(completion.token_ids, completion.finish_reason, self.tokenizer)
        return out


__all__ = ["VLLMSampler", "plan_requests", "read_completion"]
