"""The one checkpoint check (``vpo.checkpoints``) behind every command that reads a checkpoint, the
m each command reads from a checkpoint, and one run per output folder (``vpo.runs``)."""

import json
import shutil
import time

import pytest

from timed_checks import MIN_FIXED_BOUND_S
from vpo.cli import main


@pytest.fixture(scope="module")
def demo_checkpoints(tmp_path_factory):
    """Two tiny checkpoints in the demo's compact maze format: a VPO run (m = 3 by its method) and
    a GRPO run (m = 1), both recording the 5x5 linear maze task as the demo does."""
    from vpo.tasks.maze.format import CompactMazeFormat
    from vpo.models import build_char_tokenizer, build_tiny_llama

    root = tmp_path_factory.mktemp("ckpt")
    fmt = CompactMazeFormat(max_answers=3)
    tok = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    folders = {}
    for method in ("vpo", "grpo"):
        folder = root / f"{method}-s0"
        build_tiny_llama(tok, hidden=16, layers=1, heads=2, mlp=32, seed=0).save_pretrained(folder)
        tok.save_pretrained(folder)
        # as the demo wrote it before it recorded m: the method names it
        fmt.save(folder, task="maze", task_params={"size": 5, "reward_mode": "linear"}, method=method, seed=0)
        folders[method] = folder
    return folders


def _copy(folder, tmp_path, name="damaged"):
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


def _one_line_error(capsys, argv):
    start = time.perf_counter()
    code = main(argv)
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err, seconds


def _eval_argv(model, out, *extra):
    return ["eval", "--task", "maze", "--model", str(model), "--pool", "3", "--examples", "1", "--max-new-tokens",
            "4", "--no-progress", "--threads", "1", "--out", str(out), *extra]


def test_a_checkpoint_of_another_task_names_both_tasks(demo_checkpoints, tmp_path, capsys):
    # before: MathTask.__init__() got an unexpected keyword argument 'reward_mode' (a traceback)
    pytest.importorskip("math_verify")
    argv = ["eval", "--task", "math", "--model", str(demo_checkpoints["vpo"]), "--out", str(tmp_path / "e")]
    err, seconds = _one_line_error(capsys, argv)
    assert "trained on task 'maze'" in err and "not 'math'" in err and str(demo_checkpoints["vpo"]) in err
    assert seconds < 10
    for argv in (["search", "best-of-n", "--task", "math", "--model", str(demo_checkpoints["vpo"]),
                  "--out", str(tmp_path / "s")],
                 ["train", "--task", "math", "--model", str(demo_checkpoints["vpo"]), "--out", str(tmp_path / "t")]):
        err, _ = _one_line_error(capsys, argv)
        assert "trained on task 'maze'" in err and "not 'math'" in err


def test_task_params_given_explicitly_use_a_checkpoint_on_another_task(demo_checkpoints):
    from vpo.checkpoints import check_checkpoints
    from vpo.formats import TaskFormat, load_format
    from vpo.tasks import get_task

    params, (info,) = check_checkpoints([demo_checkpoints["vpo"]], task="eureqa", given={"block": "first"})
    assert params == {"block": "first"} and not info.format_applies and info.task == "maze"
    assert isinstance(load_format(demo_checkpoints["vpo"], get_task("eureqa")), TaskFormat)
    params, (info,) = check_checkpoints([demo_checkpoints["vpo"]], task="maze", given={})
    assert params == {"size": 5, "reward_mode": "linear"} and info.format_applies


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])


def _garble_header(path):
    data = bytearray(path.read_bytes())
    data[8:20] = b"not json at "
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage,needle", [
    (lambda f: (f / "model.safetensors").unlink(), "no weights"),
    (lambda f: _truncate(f / "model.safetensors"), "truncated or damaged"),
    (lambda f: _garble_header(f / "model.safetensors"), "header is not JSON"),
    (lambda f: (f / "model.safetensors").write_bytes(b"\x01"), "too short"),
    (lambda f: (f / "config.json").unlink(), "no config.json"),
    (lambda f: (f / "config.json").write_text("{"), "config.json is not readable JSON"),
    (lambda f: (f / "tokenizer.json").write_text("{broken"), "the tokenizer does not load"),
    (lambda f: [p.unlink() for p in f.glob("tokenizer*")], "the tokenizer does not load"),
    (lambda f: (f / "vpo_format.json").write_text("[1, 2"), "vpo_format.json is not readable JSON"),
    (lambda f: (f / "vpo_format.json").write_text('{"format": "nonesuch"}'), "unknown prompt format"),
])
def test_a_damaged_checkpoint_folder_is_one_line_naming_it(demo_checkpoints, tmp_path, capsys, damage, needle):
    # before: OSError / SafetensorError / JSONDecodeError tracebacks from the loaders
    folder = _copy(demo_checkpoints["vpo"], tmp_path)
    damage(folder)
    err, seconds = _one_line_error(capsys, _eval_argv(folder, tmp_path / "e"))
    assert needle in err and str(folder) in err, err
    assert seconds < 10, seconds  # headers only: no weights loaded


def test_the_check_reads_headers_only_and_is_quick(demo_checkpoints, monkeypatch):
    import transformers

    from vpo.checkpoints import check_checkpoint

    def no_weights(*args, **kwargs):
        raise AssertionError("the check loaded the weights")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    start = time.perf_counter()
    info = check_checkpoint(demo_checkpoints["vpo"], task="maze")
    assert time.perf_counter() - start < MIN_FIXED_BOUND_S  # quick: a tokenizer and headers (0.1 s idle)
    assert info.kind == "folder" and info.task == "maze"


def test_a_damaged_resume_checkpoint_is_skipped_for_the_last_whole_one(tmp_path, demo_checkpoints):
    from vpo.checkpoints import latest_complete_checkpoint

    for step in (4, 8):
        folder = tmp_path / f"checkpoint-{step}"
        shutil.copytree(demo_checkpoints["vpo"], folder)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    assert latest_complete_checkpoint(tmp_path).name == "checkpoint-8"
    (tmp_path / "checkpoint-8" / "trainer_state.json").unlink()  # killed before the trainer state was written
    assert latest_complete_checkpoint(tmp_path).name == "checkpoint-4"
    _truncate(tmp_path / "checkpoint-4" / "model.safetensors")
    assert latest_complete_checkpoint(tmp_path) is None


def test_eval_and_best_of_n_take_m_from_the_checkpoint_and_say_why(demo_checkpoints, tmp_path, capsys):
    # before: m = 1 from a VPO checkpoint that records max_answers 3 and method vpo
    assert main(_eval_argv(demo_checkpoints["vpo"], tmp_path / "vpo")) == 0
    out = capsys.readouterr().out
    assert "m = 3: the default of method 'vpo'" in out
    metrics = json.loads((tmp_path / "vpo" / "metrics.json").read_text())
    assert metrics["eval"]["answers"] == 3 and metrics["methods"]["vpo-s0"]["m"] == 3
    assert main(_eval_argv(demo_checkpoints["grpo"], tmp_path / "grpo")) == 0
    assert "m = 1: the default of method 'grpo'" in capsys.readouterr().out
    assert main(_eval_argv(demo_checkpoints["vpo"], tmp_path / "typed", "--answers", "1")) == 0
    assert "m = 1: --answers 1" in capsys.readouterr().out
    argv = ["search", "best-of-n", "--task", "maze", "--model", f"{demo_checkpoints['grpo']},{demo_checkpoints['vpo']}",
            "--labels", "GRPO,VPO", "--pool", "3", "--examples", "1", "--max-new-tokens", "4", "--threads", "1",
            "--out", str(tmp_path / "bon")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "GRPO: m = 1" in out and "VPO: m = 3" in out
    report = json.loads((tmp_path / "bon" / "search.json").read_text())
    assert [report["checkpoints"][label]["m"] for label in ("GRPO", "VPO")] == [1, 3]


def test_m_recorded_by_vpo_train_and_the_demo_wins(tmp_path, demo_checkpoints):
    from vpo.checkpoints import check_checkpoint, checkpoint_answers

    folder = _copy(demo_checkpoints["grpo"], tmp_path, "recorded")
    record = json.loads((folder / "vpo_format.json").read_text())
    (folder / "vpo_format.json").write_text(json.dumps({**record, "answers": 2}))
    assert checkpoint_answers(check_checkpoint(folder, task="maze"))[0] == 2
    (folder / "vpo_format.json").unlink()
    (folder / "vpo_train.json").write_text(json.dumps({"summary": {"answers": 3}}))
    m, why = checkpoint_answers(check_checkpoint(folder, task="maze"))
    assert m == 3 and "vpo_train.json" in why


def test_a_second_eval_into_one_folder_is_refused_unless_overwrite(demo_checkpoints, tmp_path, capsys):
    # before: both exit 0 and the first report is gone
    out = tmp_path / "e"
    assert main(_eval_argv(demo_checkpoints["grpo"], out)) == 0
    first = (out / "metrics.json").read_text()
    capsys.readouterr()
    err, _ = _one_line_error(capsys, _eval_argv(demo_checkpoints["vpo"], out))
    assert "holds an earlier vpo eval run" in err and "--overwrite" in err
    assert (out / "metrics.json").read_text() == first
    assert main(_eval_argv(demo_checkpoints["vpo"], out, "--overwrite")) == 0
    assert json.loads((out / "metrics.json").read_text())["eval"]["answers"] == 3
    capsys.readouterr()
    err, _ = _one_line_error(capsys, ["data", "export", "maze", "--out", str(out), "--train", "2", "--test", "1"])
    assert "holds a vpo eval run" in err


def test_a_folder_locked_by_another_run_is_refused(demo_checkpoints, tmp_path, capsys):
    from vpo.runs import lock_folder

    held = lock_folder(tmp_path / "busy", "vpo eval")
    try:
        err, _ = _one_line_error(capsys, _eval_argv(demo_checkpoints["grpo"], tmp_path / "busy"))
        assert "in use by another vpo eval" in err
    finally:
        held.close()


def test_an_export_whose_train_split_is_empty_says_why(tmp_path, capsys):
    # before: "no rows to write to x/train.parquet"
    err, _ = _one_line_error(capsys, ["data", "export", "musique", "--format", "verl", "--answers", "3",
                                      "--out", str(tmp_path / "x")])
    assert "test split took every one" in err and "--overlap" in err


def test_a_pool_that_cannot_fit_in_memory_is_refused_with_the_estimate(demo_checkpoints, tmp_path, capsys):
    # before: `vpo eval --pool 100000000` on 2 examples printed nothing for over a minute
    err, seconds = _one_line_error(capsys, ["eval", "--task", "maze", "--model", str(demo_checkpoints["vpo"]),
                                            "--pool", "300000000", "--examples", "2", "--no-progress",
                                            "--out", str(tmp_path / "e")])
    assert err.startswith("vpo eval: error: --pool 300000000: 2 examples x 300000000 answers") and "GB" in err
    assert "lower --pool or --examples" in err and seconds < 10 and not (tmp_path / "e").exists()
    err, _ = _one_line_error(capsys, ["search", "best-of-n", "--task", "maze", "--model", str(demo_checkpoints["vpo"]),
                                      "--pool", "300000000", "--examples", "2", "--out", str(tmp_path / "s")])
    assert "--pool 300000000" in err and "GB" in err


def test_the_stage_line_comes_before_the_model_loads_even_without_progress(demo_checkpoints, tmp_path, capsys,
                                                                           monkeypatch):
    import vpo.sampling

    seen = {}

    def record(*args, **kwargs):
        seen["out"] = capsys.readouterr().out
        raise KeyboardInterrupt

    monkeypatch.setattr(vpo.sampling, "open_sampler", record)
    assert main(_eval_argv(demo_checkpoints["vpo"], tmp_path / "e")) == 130
    assert "m = 3" in seen["out"] and "then sampling 1 chains of up to" in seen["out"]


def test_the_workload_estimate_counts_chains_tokens_and_bytes():
    from vpo.workload import check_pool_workload

    work = check_pool_workload(examples=10, pool=30, m=3, objectives=4, max_new_tokens=100, eval_weights=64,
                               checkpoints=2)
    assert (work.answers, work.chains, work.tokens) == (600, 200, 20_000)
    assert work.bytes >= 10 * 30 * 4 * 8 + 10 * 64 * 30 * 8  # vectors and the metrics' scores
    with pytest.raises(ValueError, match="--pool 30: 10 examples x 30 answers .* 1.0 KB available"):
        check_pool_workload(examples=10, pool=30, m=3, objectives=4, max_new_tokens=100, available=1024)


def test_a_demo_whose_pools_cannot_fit_is_refused_before_its_folder_is_touched(tmp_path, capsys):
    err, seconds = _one_line_error(capsys, ["demo", "--quick", "--pool", "300000000", "--out", str(tmp_path / "d")])
    assert "--pool 300000000: 12 examples x 300000000 answers" in err and seconds < 10
    assert not (tmp_path / "d").exists()
