"""Which native packages the release's import chain needs stand-ins for on this host: imports the engine's Release
in a fresh process, adds each missing top-level package to LLMOPS_GPU_STUBS, and prints the final list."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = ("import sys, importlib.util; spec = importlib.util.spec_from_file_location('moe_engine', sys.argv[1]);"
         "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m);"
         "r = m.Release({'model_path': sys.argv[2]});"
         "print(r.default_config(1, {'E': 256, 'N': 256, 'hidden': 3072, 'topk': 8}, 'up'));"
         "print(r.file_name({'E': 256, 'N': 256, 'hidden': 3072, 'topk': 8}, 'down'), r.align_source)")
engine, model = sys.argv[1], sys.argv[2]
stubs = [s for s in os.environ.get("LLMOPS_GPU_STUBS", "").split(",") if s]
for _ in range(8):
    env = {**os.environ, "LLMOPS_GPU_STUBS": ",".join(stubs)}
    proc = subprocess.run([sys.executable, "-c", CHECK, engine, model], capture_output=True, text=True, env=env)
    missing = re.findall(r"No module named '([^'.]+)", proc.stderr)
    if proc.returncode == 0 or not missing or missing[-1] in stubs:
        sys.stderr.write(proc.stdout[-500:] + (proc.stderr[-2500:] if proc.returncode else ""))
        break
    stubs.append(missing[-1])
print(",".join(stubs))
