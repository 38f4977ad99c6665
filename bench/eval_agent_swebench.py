"""The success check of ``eval agent`` for SWE-bench tasks run by mini-swe-agent.

``python -m context_engine.bench.eval_agent_swebench TRAJ INSTANCE_ID`` reads the patch
mini-swe-agent submitted (``info.submission`` of its trajectory file, ``-o`` of
``mini-extra swebench-single``), writes it as ``preds.json`` beside the trajectory, runs
the SWE-bench harness on that one instance (``python -m swebench.harness.run_evaluation``,
Docker) in that folder and exits 0 when the harness's report lists the instance as
resolved, 1 when not (no patch, tests failing, harness error). Use it as
``--check 'python -m context_engine.bench.eval_agent_swebench {workdir}/traj.json {task}'``.
``--harness`` replaces the harness command (another SWE-bench-compatible evaluator).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

MODEL_NAME = "context-engine-eval"
DEFAULT_HARNESS = f"{sys.executable} -m swebench.harness.run_evaluation"


def submission(traj: Path) -> str:
    """The patch a mini-swe-agent trajectory holds ("" when none)."""
    data = json.loads(traj.read_text(encoding="utf-8"))
    info = data.get("info") if isinstance(data, dict) else None
    patch = info.get("submission") if isinstance(info, dict) else None
    return patch if isinstance(patch, str) else ""


def resolved(report: Path, instance_id: str) -> bool:
    """Whether the harness's run report lists ``instance_id`` as resolved."""
    if not report.is_file():
        return False
    data = json.loads(report.read_text(encoding="utf-8"))
    return instance_id in (data.get("resolved_ids") or [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m context_engine.bench.eval_agent_swebench",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traj", help="mini-swe-agent's trajectory file (its -o)")
    p.add_argument("instance_id")
    p.add_argument("--dataset", default="princeton-nlp/SWE-bench_Verified", help="the harness's --dataset_name")
    p.add_argument("--run-id", default=None, help="default: ce-<arm>-<instance> ($CONTEXT_ENGINE_EVAL_ARM)")
    p.add_argument("--harness", default=DEFAULT_HARNESS, help="the evaluation command (default: %(default)s)")
    args = p.parse_args(argv)
    traj = Path(args.traj)
    patch = submission(traj) if traj.is_file() else ""
    if not patch.strip():
        print(f"eval_agent_swebench: no patch in {traj}", file=sys.stderr)
        return 1
    folder = traj.parent
    preds = folder / "preds.json"
    preds.write_text(json.dumps([{"instance_id": args.instance_id, "model_name_or_path": MODEL_NAME,
                                  "model_patch": patch}]), encoding="utf-8")
    run_id = args.run_id or f"ce-{os.environ.get('CONTEXT_ENGINE_EVAL_ARM', 'arm')}-{args.instance_id}"
    command = shlex.split(args.harness) + [
        "--dataset_name", args.dataset, "--predictions_path", str(preds), "--instance_ids", args.instance_id,
        "--max_workers", "1", "--run_id", run_id]
    code = subprocess.call(command, cwd=folder, stdin=subprocess.DEVNULL)
    ok = resolved(folder / f"{MODEL_NAME}.{run_id}.json", args.instance_id)
    print(f"eval_agent_swebench: {args.instance_id} {'resolved' if ok else 'not resolved'} "
          f"(harness exit {code})", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
