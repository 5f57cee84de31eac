"""``spica`` command line: validate, schema, space, evaluate, sweep, show, emit, serve.

Every command keeps one exit-code contract (``exits.py``): 0 success, 2 bad input with a message naming
the field or the file and line, 1 when it ran but found nothing feasible; never a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Callable, Sequence

from spica_cli.exits import EXIT_INTERRUPTED, EXIT_NO_RESULT, EXIT_OK, EXIT_USAGE


def _quiet_environment() -> None:
    """Defaults that keep the engines' logs out of the user's terminal and Prefect offline."""
    os.environ.setdefault("DYN_LOG", "error")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    # Stage logs still reach the Prefect API (the UI); the terminal gets Spica's own output, and a
    # failed stage's traceback is not printed on top of the one-line error.
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


def cmd_validate(args: argparse.Namespace) -> int:
    from spica_core.config.describe import describe
    from spica_core.run.inputs import load_inputs

    inputs = load_inputs(args.config)
    print(describe(inputs.config, inputs.trace))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from spica_core.config.model import SmartSearchConfig

    print(json.dumps(SmartSearchConfig.model_json_schema(), indent=2))
    return EXIT_OK


def cmd_space(args: argparse.Namespace) -> int:
    from spica_cli.space import space_command

    return space_command(args.config, args.json)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from spica_cli.evaluate import evaluate_command

    return evaluate_command(args.config, args.json, args.calibration)


def cmd_sweep(args: argparse.Namespace) -> int:
    from spica_cli.sweep import sweep_command

    return sweep_command(args.config, args.runs_root, args.run_dir, args.seed, args.from_stage, args.warm_start,
                         args.cluster, args.calibration)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from spica_cli.calibrate import calibrate_command

    return calibrate_command(args.measurements, args.out, args.run)


def cmd_serve(args: argparse.Namespace) -> int:
    from spica_cli.serve import serve_command

    return serve_command(args.resweep, args.interval, args.cron)


def cmd_watch(args: argparse.Namespace) -> int:
    from spica_cli.serve import watch_command

    return watch_command(args.config, args.runs_root, args.every, args.once)


def cmd_show(args: argparse.Namespace) -> int:
    from spica_cli.show import show_command

    return show_command(args.run_dir, args.calibration, args.json)


def cmd_emit(args: argparse.Namespace) -> int:
    from spica_cli.emit import emit_command

    return emit_command(args.run_dir, args.top, args.all, args.out, args.image, args.namespace,
                        args.model_cache_pvc or None, tuple(args.gpu_product_label))


def _int_at_least(minimum: int, option: str = "") -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum`` (``option`` names the flag in the message)."""
    what = f"{option} must be" if option else "must be"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{what} an integer >= {minimum}, got {value}")
        return value

    return parse


_positive = _int_at_least(1)
CALIBRATION_HELP = ("a calibration file written by `spica calibrate`: corrects the latencies, bands and SLA count of "
                    "the groups it measured; overrides goal.calibration")
_seed = _int_at_least(0, "--seed")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spica", description="Find the best Dynamo deployment by replaying "
                                     "your traffic through Dynamo's offline replay.")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_: str, config: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        if config:
            p.add_argument("config", help="SmartSearchConfig YAML file")
        p.set_defaults(fn=fn)
        return p

    add("validate", cmd_validate, "check a config and print its normalised summary")
    add("schema", cmd_schema, "print the JSON Schema of the config", config=False)
    add("space", cmd_space, "list the deployments a config may try, per mode and backend").add_argument(
        "--json", action="store_true", help="machine-readable output (see docs/space.md)")
    p = add("evaluate", cmd_evaluate, "replay one fully pinned candidate and print its metrics and score")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.add_argument("--calibration", default=None, metavar="FILE", help=CALIBRATION_HELP)
    p = add("calibrate", cmd_calibrate, "turn measurements on your own GPUs (AIPerf exports of the benchmark plans, "
            "or silicon-format CSV rows) into a calibration file", config=False)
    p.add_argument("measurements", nargs="+", metavar="MEASUREMENTS",
                   help="AIPerf export folders or profile_export_aiperf.json files written by benchmarks/rank-N.sh, "
                        "or CSV files in the columns of aiconfigurator-core's systems/silicon_sample.csv")
    p.add_argument("--out", required=True, metavar="FILE", help="the calibration file to write (JSON)")
    p.add_argument("--run", default=None, metavar="RUN_DIR",
                   help="the run whose plans made the AIPerf exports (default: the run folder an export sits in)")
    p = add("sweep", cmd_sweep, "run the sweep flow and write its artifacts under runs/<run id>/")
    p.add_argument("--run-dir", default=None, help="write the run here instead of runs/<run id>/")
    p.add_argument("--runs-root", default="runs", help="parent folder of run folders (default: runs)")
    p.add_argument("--seed", type=_seed, default=None, help="override sweep.seed (another seed is another run)")
    from spica_core.run.stages import STAGE_NAMES  # (not the catalog: `spica --help` needs no pyarrow)

    p.add_argument("--from-stage", choices=list(STAGE_NAMES), default=None, metavar="STAGE",
                   help="recompute this stage and everything computed from it: " + ", ".join(STAGE_NAMES))
    p.add_argument("--warm-start", default=None, metavar="RUN_DIR",
                   help="evaluate an earlier run's top candidates first (on this run's trace; no score is copied)")
    p.add_argument("--cluster", default=None, metavar="ADDRESS",
                   help="evaluate on an existing cluster: tcp://HOST:PORT (Dask scheduler) or ray://HOST:PORT (Ray "
                        "client server); overrides sweep.cluster (see docs/clusters.md)")
    p.add_argument("--calibration", default=None, metavar="FILE", help=CALIBRATION_HELP)
    p = add("serve", cmd_serve, "serve spica-sweep/local and spica-resweep/local against PREFECT_API_URL (the UI)",
            config=False)
    p.add_argument("--resweep", default=None, metavar="CONFIG", help="the config spica-resweep/local re-sweeps on "
                   "its schedule (events name their own config)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--interval", type=float, default=None, metavar="SECONDS", help="re-sweep every SECONDS")
    when.add_argument("--cron", default=None, metavar="EXPR", help="re-sweep on this cron schedule")
    p = add("watch", cmd_watch, "emit spica.trace.changed whenever the config's trace file changes (re-sweeps it)")
    p.add_argument("--runs-root", default="runs", help="where the config's runs live (default: runs)")
    p.add_argument("--every", type=float, default=10.0, metavar="SECONDS", help="poll interval (default: 10)")
    p.add_argument("--once", action="store_true", help="stop after the first change")
    p = add("show", cmd_show, "print a finished run's top candidates (or front) and where its files are", config=False)
    p.add_argument("run_dir", help="a run folder (runs/<run id>/ or a --run-dir)")
    p.add_argument("--calibration", default=None, metavar="FILE",
                   help="rank the run's candidates again under this calibration, without replaying")
    p.add_argument("--json", action="store_true", help="the ranking as JSON instead of text")
    p = add("emit", cmd_emit, "write DynamoGraphDeployment manifests for a finished run again (no replay)",
            config=False)
    p.add_argument("run_dir", help="a run folder (runs/<run id>/ or a --run-dir)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--top", type=_positive, default=3, help="manifests for the best N candidates (default 3)")
    which.add_argument("--all", action="store_true", help="a manifest for every candidate (every point of a front)")
    p.add_argument("--out", default=None, help="write the manifests here (default: RUN_DIR/manifests)")
    p.add_argument("--image", default=None, help="container image of the workers (default: the Dynamo runtime image "
                   "of the candidate's backend)")
    p.add_argument("--namespace", default=None, help="metadata.namespace of the manifests (default: none)")
    p.add_argument("--model-cache-pvc", default="model-cache",
                   help="PVC mounted on the workers as the model cache (default: model-cache; '' for none)")
    p.add_argument("--gpu-product-label", action="append", default=[], metavar="SKU=VALUE", type=_product_label,
                   help="the nvidia.com/gpu.product label value of a GPU type's nodes, for the workers' node "
                        "selector (see `kubectl get nodes -L nvidia.com/gpu.product`; repeatable; default: "
                        "the usual GPU feature discovery value, e.g. h200_sxm=NVIDIA-H200)")
    return parser


_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


def _product_label(text: str) -> tuple[str, str]:
    """``SKU=VALUE`` with a valid Kubernetes label value."""
    sku, sep, value = text.partition("=")
    if not sep or not sku:
        raise argparse.ArgumentTypeError(f"{text!r}: give SKU=VALUE, e.g. h200_sxm=NVIDIA-H200")
    if not _LABEL_VALUE.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a Kubernetes label value (up to 63 letters, digits, "
                                         "'-', '_' or '.', starting and ending with a letter or digit)")
    return sku, value


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not hit the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file descriptor (e.g. captured): nothing will be flushed
        pass


def main(argv: Sequence[str] | None = None) -> int:
    _quiet_environment()
    args = build_parser().parse_args(argv)
    from spica_core.errors import NoViableParallelConfigError, SpicaError

    try:
        return args.fn(args)
    except NoViableParallelConfigError as exc:  # the inputs are valid; nothing in them can be deployed
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NO_RESULT
    except SpicaError as exc:
        return _fail(str(exc))
    except BrokenPipeError:  # output piped into e.g. `head`: the reader has what it wanted (before OSError, its base)
        _silence_stdout()
        return EXIT_OK
    except OSError as exc:  # a file the user named cannot be read or written
        return _fail(str(exc))
    except KeyboardInterrupt:  # Ctrl-C (a sweep's supervisor says it for the child: spica_cli/supervisor.py)
        from spica_cli.supervisor import CHILD_ENV

        if CHILD_ENV not in os.environ:
            print("interrupted; finished stages are kept in the run folder", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
