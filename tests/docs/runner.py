"""Run one page's blocks in order in the current directory: Python blocks in one namespace (as a
reader following the page in one session), shell blocks through ``bash -euo pipefail``.

    python -m tests.docs.runner BLOCKS.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback


def main(path: str) -> int:
    namespace: dict = {"__name__": "__main__"}
    with open(path, encoding="utf-8") as f:
        page = json.load(f)
    for block in page:
        print(f"--- {block['where']} ({block['lang']}) at {time.perf_counter():.1f} s", flush=True)
        if block["lang"] == "python":
            try:
                exec(compile(block["code"], block["where"], "exec"), namespace)
            except BaseException:  # noqa: BLE001 (any failure of a block fails the page)
                traceback.print_exc()
                print(f"FAILED {block['where']}", flush=True)
                return 1
        else:
            if subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]]).returncode:
                print(f"FAILED {block['where']}", flush=True)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
