"""The ``-- CMD`` adapter of ``eval agent``: any agent command (mini-swe-agent on
SWE-bench, a script of yours) run once per task per arm.

``--tasks FILE.jsonl``: one JSON object per line; its id is ``instance_id`` (SWE-bench),
else ``id``, else ``task_id``. For each task and arm the command runs:

- in its own working folder, ``<out>/tasks/<arm>/<task id>`` (the task's JSON line is
  written there as ``task.json``), with its output in ``command.out`` / ``command.err``;
- with the arm's proxy in its environment: ``OPENAI_BASE_URL`` and ``OPENAI_API_BASE``
  (``<proxy>/v1``), ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_BASE`` (litellm) and
  ``GOOGLE_GEMINI_BASE_URL`` (``<proxy>``),
  every name in the task's ``base_url_env`` list (``<proxy>/v1``), the task's ``env``
  object, and ``CONTEXT_ENGINE_EVAL_ARM`` / ``_TASK`` / ``_WORKDIR``;
- with placeholders filled in each argument: ``{task}``, ``{arm}``, ``{workdir}``,
  ``{base_url}`` (``<proxy>/v1``), ``{proxy_url}``, ``{model}`` and every scalar field of
  the task line (``{repo}``); an unknown ``{name}`` stays as it is. No shell is involved:
  a field's text is one argument, never parsed as shell syntax.

The task is solved when the command exits 0, or with ``--check CMD`` (same folder,
environment and placeholders) when the check exits 0. ``--timeout`` (or the task's own
``timeout`` field, in seconds) kills the command's whole process group. The key is the command's own (its environment): the proxies pass it
upstream and never store it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_engine.bench.eval_agent_arms import ArmProxy
from context_engine.bench.eval_agent_runner import Outcome

ID_FIELDS = ("instance_id", "id", "task_id")
PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class CommandTask:
    id: str
    fields: dict[str, Any]


def load_tasks(path: str | Path) -> list[CommandTask]:
    """The tasks of a JSONL file; ValueError names the line of a bad or duplicate one."""
    tasks, seen = [], set()
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(fields, dict):
            raise ValueError(f"{path}:{n}: a task is a JSON object")
        task_id = next((str(fields[k]) for k in ID_FIELDS if fields.get(k) not in (None, "")), None)
        if task_id is None:
            raise ValueError(f"{path}:{n}: no {' / '.join(ID_FIELDS)} field")
        if task_id in seen:
            raise ValueError(f"{path}:{n}: task {task_id} appears twice")
        seen.add(task_id)
        tasks.append(CommandTask(task_id, fields))
    return tasks


def folder_name(task_id: str) -> str:
    return re.sub(r"[^\w.-]", "_", task_id)[:120] or "_"


def fill(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    return [PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), arg) for arg in argv]


@dataclass(frozen=True)
class CommandRunner:
    """``run_one`` of ``eval_agent_runner.run_tasks`` for a command."""

    command: tuple[str, ...]
    check: tuple[str, ...]
    out: Path
    model: str
    timeout: float

    def values(self, task: CommandTask, arm: str, workdir: Path, proxy_url: str) -> dict[str, str]:
        scalars = {k: str(v) for k, v in task.fields.items()
                   if isinstance(v, (str, int, float)) and not isinstance(v, bool)}
        return {**scalars, "task": task.id, "arm": arm, "workdir": str(workdir),
                "base_url": proxy_url + "/v1", "proxy_url": proxy_url, "model": self.model}

    def environment(self, task: CommandTask, values: Mapping[str, str]) -> dict[str, str]:
        env = dict(os.environ)
        v1, root = values["base_url"], values["proxy_url"]
        env.update({"OPENAI_BASE_URL": v1, "OPENAI_API_BASE": v1, "ANTHROPIC_BASE_URL": root,
                    "ANTHROPIC_API_BASE": root, "GOOGLE_GEMINI_BASE_URL": root, "CONTEXT_ENGINE_EVAL_ARM": values["arm"],
                    "CONTEXT_ENGINE_EVAL_TASK": task.id, "CONTEXT_ENGINE_EVAL_WORKDIR": values["workdir"]})
        for name in task.fields.get("base_url_env") or []:
            env[str(name)] = v1
        for name, value in (task.fields.get("env") or {}).items():
            env[str(name)] = fill([str(value)], values)[0]
        return env

    def __call__(self, task: CommandTask, arm: str, proxy: ArmProxy) -> Outcome:
        workdir = (self.out / "tasks" / arm / folder_name(task.id)).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "task.json").write_text(json.dumps(task.fields), encoding="utf-8")
        values = self.values(task, arm, workdir, proxy.url)
        env = self.environment(task, values)
        timeout = float(task.fields.get("timeout") or self.timeout)
        code = run_command(fill(self.command, values), workdir, env, timeout, "command")
        if code is None:
            return Outcome(False, "timeout", f"killed after {timeout:g} s")
        if not self.check:
            return Outcome(code == 0, f"exit {code}")
        checked = run_command(fill(self.check, values), workdir, env, timeout, "check")
        return Outcome(checked == 0, f"exit {code}", f"check exit {checked}")


def run_command(argv: list[str], cwd: Path, env: dict[str, str], timeout: float, name: str) -> int | None:
    """Run ``argv``; its exit code, or None when ``timeout`` passed (its group is killed).
    A command that cannot start exits 127, as in a shell."""
    with open(cwd / f"{name}.out", "wb") as out, open(cwd / f"{name}.err", "wb") as err:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=err, start_new_session=True)
        except OSError as exc:
            err.write(f"eval agent: cannot run {argv[0]}: {exc}\n".encode())
            return 127
        try:
            return proc.wait(timeout=timeout if timeout > 0 else None)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the session this call started
            proc.wait()
            return None
