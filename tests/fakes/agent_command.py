"""A tiny agent command for ``eval agent -- CMD`` tests: one chat request with the openai
SDK to ``$OPENAI_BASE_URL``, the reply written to ``answer.txt`` in the working folder.

``python3 agent_command.py TASK_ID [--sleep S]``: writes ``seen.json`` (the task id it was
given, the base URL and arm from its environment, the task line from ``task.json``) so a
test can check what the harness handed it; ``--sleep`` waits first (a hung agent); ``pid``
holds its process id.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    task_id = sys.argv[1]
    Path("pid").write_text(str(os.getpid()), encoding="utf-8")
    if "--sleep" in sys.argv:
        time.sleep(float(sys.argv[sys.argv.index("--sleep") + 1]))
    task = json.loads(Path("task.json").read_text(encoding="utf-8"))
    Path("seen.json").write_text(json.dumps({
        "task": task_id, "base_url": os.environ["OPENAI_BASE_URL"],
        "anthropic": os.environ.get("ANTHROPIC_BASE_URL"), "own": os.environ.get("MY_AGENT_URL"),
        "arm": os.environ.get("CONTEXT_ENGINE_EVAL_ARM"), "line": task}), encoding="utf-8")
    from openai import OpenAI  # after the pid and the sleep: a slow import is no hang

    client = OpenAI(api_key="sk-agent-command", max_retries=0)  # base URL from the environment
    reply = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": f"Solve {task_id}: {task.get('prompt', '')}"}])
    Path("answer.txt").write_text(reply.choices[0].message.content or "", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
