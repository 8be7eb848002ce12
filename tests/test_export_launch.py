"""`pase export --engine megatron|torchtitan` and `pase evaluate --from`: a layout written as
the framework's config, read back, prices the same; the names are the frameworks' own;
what pase cannot price or write is refused in one line."""
import argparse
import json
import os
import shlex
import sys

import pytest

from pase.cli import main
from pase.export.megatron_flags import ARITY, CHOICES

# (engine, model, devices, cluster, layout, options, model options)
ROUND_TRIPS = [
    ("megatron", "llama3-8b", 16, "h100-sxm", "tp=2,pp=2,dp=4",
     ["--schedule", "interleaved:2", "--zero", "1", "--recompute", "full",
      "--sequence-parallel", "--precision", "fp8"], []),
    ("megatron", "llama3-8b", 16, "dgx-b200", "tp=4,dp=2,cp=2",
     ["--zero", "3", "--recompute", "selective", "--sequence-parallel", "--precision", "mxfp8",
      "--tp-overlap", "off"], []),
    ("megatron", "llama3-8b", 16, "dgx-b200", "dp=16",
     ["--zero", "2", "--precision", "nvfp4", "--dropout", "--attention", "unfused"], []),
    ("megatron", "gpt3", 8, "dgx-a100", "tp=2,pp=4", ["--precision", "fp16"], ["layers=8"]),
    ("megatron", "mixtral-8x7b", 16, "h100-sxm", "tp=2,pp=2,dp=4,ep=4",
     ["--sequence-parallel", "--zero", "1"], ["layers=4"]),
    ("megatron", "qwen3-30b-a3b", 16, "h100-sxm", "tp=2,dp=8,ep=8,etp=1",
     ["--sequence-parallel", "--recompute", "full", "--ep-overlap", "on"], ["layers=4"]),
    ("torchtitan", "llama3-8b", 16, "h100-sxm", "tp=2,pp=2,dp=4",
     ["--schedule", "interleaved:2", "--zero", "3", "--recompute", "full",
      "--sequence-parallel", "--precision", "fp8"], []),
    ("torchtitan", "llama3-8b", 16, "dgx-b200", "tp=4,dp=2,cp=2",
     ["--zero", "2", "--sequence-parallel", "--precision", "mxfp8"], []),
    ("torchtitan", "llama3-8b", 16, "h100-sxm", "pp=4,dp=4",
     ["--schedule", "gpipe", "--precision", "fp32"], ["seq=4096"]),
    ("torchtitan", "qwen3-30b-a3b", 16, "h100-sxm", "tp=2,dp=8,ep=4",
     ["--zero", "3", "--recompute", "full", "--sequence-parallel"], []),
]


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _export(capsys, tmp_path, engine, model, p, layout, options, model_options, batch="64"):
    path = tmp_path / ("args.txt" if engine == "megatron" else "job.toml")
    mo = [x for o in model_options for x in ("--model-option", o)]
    code, _, err = _run(capsys, "export", model, "-p", p, "--layout", layout, "--micro-batch", 1,
                        "--global-batch", batch, "--engine", engine, "-o", path, *options, *mo)
    assert code == 0, err
    return path


@pytest.mark.parametrize("engine, model, p, cluster, layout, options, model_options", ROUND_TRIPS,
                         ids=[f"{r[0]}-{r[1]}-{r[4]}" for r in ROUND_TRIPS])
def test_an_exported_layout_read_back_prices_the_same(capsys, tmp_path, engine, model, p, cluster,
                                                      layout, options, model_options):
    path = _export(capsys, tmp_path, engine, model, p, layout, options, model_options)
    mo = [x for o in model_options for x in ("--model-option", o)]
    code, out, err = _run(capsys, "evaluate", model, "-p", p, "--cluster", cluster, "--layout",
                          layout, "--micro-batch", 1, "--global-batch", 64, *options, *mo,
                          "--format", "json")
    assert code == 0, err
    direct = json.loads(out)
    # the model options a Megatron file sets come from its size flags, not the command line
    again = mo if engine == "torchtitan" else []
    code, out, err = _run(capsys, "evaluate", model, "-p", p, "--cluster", cluster,
                          "--from", engine, path, *again, "--format", "json")
    assert code == 0, err
    back = json.loads(out)
    assert back["layout"] == direct["layout"]
    assert back["step_seconds"] == direct["step_seconds"]
    assert back["memory_bytes"] == direct["memory_bytes"]
    assert back["memory"] == direct["memory"]


def _megatron_parser() -> argparse.ArgumentParser:
    """An argparse parser with Megatron-LM's flag names, arities and choices, as vendored."""
    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False, exit_on_error=False)
    for name, arity in ARITY.items():
        if arity == 0:
            parser.add_argument(name, action="store_true")
        else:
            parser.add_argument(name, nargs=None if arity == 1 else arity,
                                choices=CHOICES.get(name))
    return parser


def _flags(path) -> list[str]:
    return shlex.split(path.read_text(), comments=True)


@pytest.mark.parametrize("row", [r for r in ROUND_TRIPS if r[0] == "megatron"],
                         ids=lambda r: f"{r[1]}-{r[4]}")
def test_megatron_flags_parse_with_megatron_lms_names_arities_and_choices(capsys, tmp_path, row):
    engine, model, p, _, layout, options, model_options = row
    words = _flags(_export(capsys, tmp_path, engine, model, p, layout, options, model_options))
    args = _megatron_parser().parse_args(words)  # an unknown name or a bad value raises
    assert args.tensor_model_parallel_size == layout.split(",")[0].partition("=")[2] \
        or "tp=" not in layout
    for must in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                 "--context-parallel-size", "--micro-batch-size", "--global-batch-size",
                 "--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length"):
        assert must in words, must


def test_megatron_export_spells_each_option_as_megatron_core_does(capsys, tmp_path):
    path = _export(capsys, tmp_path, "megatron", "mixtral-8x7b", 16,
                   "tp=2,pp=2,dp=4,ep=4", ["--schedule", "interleaved:2", "--zero", "1",
                                           "--recompute", "full", "--sequence-parallel",
                                           "--precision", "fp8"], ["layers=4"])
    text = path.read_text()
    for line in ("--num-layers-per-virtual-pipeline-stage 1", "--expert-model-parallel-size 4",
                 "--expert-tensor-parallel-size 2", "--sequence-parallel",
                 "--recompute-granularity full", "--recompute-method uniform",
                 "--recompute-num-layers 1", "--use-distributed-optimizer", "--bf16",
                 "--fp8-format hybrid", "--fp8-recipe tensorwise", "--num-layers 4",
                 "--num-query-groups 8", "--num-experts 8", "--moe-router-topk 2",
                 "--ffn-hidden-size 14336", "--global-batch-size 64"):
        assert f"\n{line}\n" in text, line


@pytest.mark.skipif(not os.environ.get("PASE_MEGATRON_LM"),
                    reason="set PASE_MEGATRON_LM to a Megatron-LM checkout to re-read its parser")
def test_vendored_flags_are_megatron_lms_parser(capsys, tmp_path):  # pragma: no cover
    import typing
    import warnings

    typing.override = getattr(typing, "override", lambda f: f)  # its code needs Python 3.12's
    sys.path.insert(0, os.environ["PASE_MEGATRON_LM"])
    warnings.simplefilter("ignore")
    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    live = {s for a in parser._actions for s in a.option_strings if s.startswith("--")}
    assert live == set(ARITY)
    for row in [r for r in ROUND_TRIPS if r[0] == "megatron"]:
        engine, model, p, _, layout, options, model_options = row
        path = _export(capsys, tmp_path, engine, model, p, layout, options, model_options)
        parser.parse_args(_flags(path))


@pytest.mark.slow  # torchtitan imports torch
def test_torchtitan_job_is_read_by_torchtitans_own_parser(capsys, tmp_path):
    # torchtitan is no pase extra (0.2, the last release with TOML jobs, needs torchdata,
    # datasets and tensorboard), so this check runs where a developer installed it by hand
    manager = pytest.importorskip(
        "torchtitan.config.manager",
        reason="torchtitan 0.2 is no pase extra: pip install torchtitan==0.2.2 to run this check")
    for row in [r for r in ROUND_TRIPS if r[0] == "torchtitan"]:
        engine, model, p, _, layout, options, model_options = row
        path = _export(capsys, tmp_path, engine, model, p, layout, options, model_options)
        config = manager.ConfigManager().parse_args(["--job.config_file", str(path)])
        assert config.parallelism.pipeline_parallel_degree == (4 if "pp=4" in layout else
                                                               2 if "pp=2" in layout else 1)


def test_a_launch_script_with_its_launcher_and_neutral_flags_is_read(capsys, tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "# Llama 3 8B, as a user runs it\n"
        "torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py \\\n"
        "  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \\\n"
        "  --micro-batch-size 1 --global-batch-size=64 --bf16 \\\n"
        "  --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --train-iters 1000 \\\n"
        "  --data-path /data/x --save /ckpt --log-interval 1 --seed 1234 \\\n"
        "  --attention-dropout 0.0 --hidden-dropout 0.0 --num-layers 4  # shortened\n")
    code, out, err = _run(capsys, "evaluate", "llama3-8b", "-p", 16, "--cluster", "h100-sxm",
                          "--from", "megatron", script, "--format", "json")
    assert code == 0, err
    read = json.loads(out)
    code, out, err = _run(capsys, "evaluate", "llama3-8b", "-p", 16, "--cluster", "h100-sxm",
                          "--layout", "tp=2,pp=2,dp=4", "--micro-batch", 1, "--global-batch", 64,
                          "--model-option", "layers=4", "--tp-overlap", "off", "--format", "json")
    assert code == 0, err
    assert read["step_seconds"] == json.loads(out)["step_seconds"]


@pytest.mark.parametrize("text, named", [
    ("--micro-batch-size 1 --no-such-flag 3", "--no-such-flag"),
    ("--micro-batch-size 1 --fine-grained-activation-offloading",
     "--fine-grained-activation-offloading"),
    ("--micro-batch-size 1 --recompute-granularity full --recompute-method block "
     "--recompute-num-layers 2", "block"),
    ("--micro-batch-size 1 --fp8-format hybrid --fp8-recipe custom", "custom"),
    ("--micro-batch-size 1 --recompute-granularity partial", "partial"),
    ("--micro-batch-size 1 --num-experts 8", "--num-experts"),
    ("--tensor-model-parallel-size 3", "tp x pp x cp"),
    ("--tensor-model-parallel-size 2", "--micro-batch-size"),
])
def test_megatron_flags_pase_cannot_price_are_named_in_one_line(capsys, tmp_path, text, named):
    # a real flag, refused as unpriced, not as unknown
    assert "--fine-grained-activation-offloading" in ARITY
    path = tmp_path / "args.txt"
    path.write_text(text + "\n")
    code, out, err = _run(capsys, "evaluate", "llama3-8b", "-p", 16, "--cluster", "h100-sxm",
                          "--from", "megatron", path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert named in err


@pytest.mark.parametrize("extra, named", [
    ("[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 8\n"
     "[activation_checkpoint]\nmode = \"none\"\n", "HSDP"),
    ("[activation_checkpoint]\nmode = \"selective\"\n", "activation_checkpoint.mode"),
    ("[activation_checkpoint]\nmode = \"none\"\n[parallelism]\ntensor_parallel_dgree = 2\n",
     "parallelism.tensor_parallel_dgree"),
    ("[activation_checkpoint]\nmode = \"none\"\n[training]\nlocal_batch_size = \"8\"\n",
     "training.local_batch_size"),
    ("", "activation_checkpoint.mode"),  # torchtitan's default mode, selective
])
def test_torchtitan_keys_pase_cannot_price_are_named_in_one_line(capsys, tmp_path, extra, named):
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n' + extra)
    code, out, err = _run(capsys, "evaluate", "llama3-8b", "-p", 16, "--cluster", "h100-sxm",
                          "--from", "torchtitan", path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert named in err


def test_a_torchtitan_job_of_another_model_is_refused(capsys, tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "70B"\n[activation_checkpoint]\n'
                    'mode = "none"\n')
    code, _, err = _run(capsys, "evaluate", "llama3-8b", "-p", 16, "--cluster", "h100-sxm",
                        "--from", "torchtitan", path)
    assert code == 2 and "70B" in err and "8B" in err


@pytest.mark.parametrize("engine, layout, options, named", [
    ("megatron", "pp=2,dp=8", ["--schedule", "gpipe"], "gpipe"),
    ("megatron", "dp=16", ["--precision", "fp8", "--zero", "1", "--recompute", "selective"], None),
    ("torchtitan", "dp=16", ["--zero", "1"], "ZeRO-1"),
    ("torchtitan", "tp=2,dp=8", [], "--sequence-parallel"),
    ("torchtitan", "dp=16", ["--recompute", "selective"], "selective"),
    ("torchtitan", "dp=16", ["--precision", "nvfp4"], "nvfp4"),
])
def test_what_a_framework_cannot_run_is_refused_at_export(capsys, tmp_path, engine, layout,
                                                          options, named):
    code, _, err = _run(capsys, "export", "llama3-8b", "-p", 16, "--layout", layout,
                        "--micro-batch", 1, "--global-batch", 64, "--engine", engine, *options)
    if named is None:
        assert code == 0, err
        return
    assert code == 2 and len(err.strip().splitlines()) == 1 and named in err, err


def test_a_plan_that_is_not_a_layout_names_its_ops_and_points_to_the_per_op_export(capsys,
                                                                                    tmp_path):
    plan = tmp_path / "plan.json"
    args = ["llama3-8b", "-p", 16, "--model-option", "layers=2"]
    code, _, err = _run(capsys, "evaluate", *args, "--cluster", "h100-sxm", "--layout", "tp=2,dp=8",
                        "--micro-batch", 1, "--global-batch", 64, "--sequence-parallel",
                        "--output", plan)
    assert code == 0, err
    code, out, err = _run(capsys, "export", *args, "--strategy", plan, "--engine", "megatron")
    assert code == 0, err
    assert "--tensor-model-parallel-size 2\n" in out and "--sequence-parallel\n" in out
    data = json.loads(plan.read_text())
    del data["layout"]  # a plan that records no layout: its ops say which one it is
    data["strategy"]["layers1.mlp.up"] = {"b": 16}
    plan.write_text(json.dumps(data))
    code, out, err = _run(capsys, "export", *args, "--model-option", "batch=8", "--strategy", plan,
                          "--engine", "torchtitan")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "layers1.mlp.up: plan {b: 16} vs layout {b: 8, f: 2}" in err
    assert "--engine torch" in err and "1 op(s)" in err


def test_export_flags_of_the_launch_engines_are_refused_for_jax(capsys):
    code, _, err = _run(capsys, "export", "mlp", "-p", 8, "--strategy", "x.json", "--engine", "jax",
                        "--layout", "dp=8")
    assert code == 2 and err.startswith("pase: error: --layout applies only with --engine megatron")


@pytest.mark.parametrize("engine, path, options", [
    ("megatron", "examples/llama3-8b-megatron.txt", ["--zero", "1", "--recompute", "selective"]),
    ("torchtitan", "examples/llama3-8b-torchtitan.toml", ["--zero", "3", "--recompute", "full"]),
])
def test_the_shipped_examples_are_what_export_writes(capsys, engine, path, options):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # as docs/export-launch.md writes them (its -o left out of the file's first line)
    code, out, err = _run(capsys, "export", "llama3-8b", "-p", 64, "--layout", "tp=2,pp=2,dp=16",
                          "--micro-batch", 1, "--global-batch", 512, *options,
                          "--sequence-parallel", "--engine", engine)
    assert code == 0, err
    with open(os.path.join(root, path)) as f:
        assert out == f.read()


def test_keys_left_out_of_a_torchtitan_job_take_torchtitans_defaults(capsys, tmp_path):
    path = tmp_path / "job.toml"  # seq_len 2048, local batch 8, dp the devices left, FSDP
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[activation_checkpoint]\n'
                    'mode = "none"\n')
    code, out, err = _run(capsys, "evaluate", "llama3-8b", "-p", 8, "--cluster", "h100-sxm",
                          "--from", "torchtitan", path, "--format", "json")
    assert code == 0, err
    read = json.loads(out)
    assert read["layout"]["micro_batch"] == 8 and read["layout"]["global_batch"] == 64
    assert read["layout"]["dp"] == 8 and read["layout"]["zero"] == 3
    code, out, err = _run(capsys, "evaluate", "llama3-8b", "-p", 8, "--cluster", "h100-sxm",
                          "--layout", "dp=8", "--micro-batch", 8, "--global-batch", 64,
                          "--zero", 3, "--model-option", "seq=2048", "--format", "json")
    assert code == 0, err
    assert read["step_seconds"] == json.loads(out)["step_seconds"]


def test_query_groups_without_the_gqa_switch_are_refused(capsys, tmp_path):
    path = tmp_path / "args.txt"  # Megatron-LM would silently run every head its own kv
    path.write_text("--micro-batch-size 1 --num-query-groups 8\n")
    code, _, err = _run(capsys, "evaluate", "llama3-8b", "-p", 8, "--cluster", "h100-sxm",
                        "--from", "megatron", path)
    assert code == 2 and "--group-query-attention" in err


def test_a_pipeline_plan_is_exported_as_the_layout_it_records(capsys, tmp_path):
    plan = tmp_path / "plan.json"
    args = ["llama3-8b", "-p", 16, "--model-option", "layers=4"]
    code, _, err = _run(capsys, "evaluate", *args, "--cluster", "h100-sxm", "--layout",
                        "tp=2,pp=2,dp=4", "--micro-batch", 1, "--global-batch", 64,
                        "--schedule", "interleaved:2", "--output", plan)
    assert code == 0, err
    code, out, err = _run(capsys, "export", *args, "--strategy", plan, "--engine", "megatron")
    assert code == 0, err
    assert "\n--num-layers-per-virtual-pipeline-stage 1\n" in out and "\n--num-layers 4\n" in out
    code, _, err = _run(capsys, "export", *args, "--strategy", plan, "--engine", "megatron",
                        "--zero", 1)
    assert code == 2 and "the plan records its layout's options" in err
