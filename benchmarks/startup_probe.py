"""Scratch probe (session 25): what the MoE engine's start costs on the GPU host."""
import json, os, subprocess, sys, time

CHAIN = ["sglang.kernels.ops.moe.fused_moe_triton_kernels",
         "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config",
         "sglang.srt.server_args"]

CHILD = r'''
import sys, time, traceback, json
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import triton
t2 = time.perf_counter()
stacks = []
orig = torch.cuda._lazy_init
def spy():
    if not torch.cuda.is_initialized() and not stacks:
        stacks.append("".join(traceback.format_stack(limit=25)[:-1]))
    return orig()
torch.cuda._lazy_init = spy
import importlib
times = {}
for name in sys.argv[1].split(","):
    a = time.perf_counter(); importlib.import_module(name); times[name] = round(time.perf_counter() - a, 2)
t3 = time.perf_counter()
init_after_import = torch.cuda.is_initialized()
mods = len(sys.modules)
a = time.perf_counter(); torch.cuda.init(); torch.empty(1, device="cuda"); ctx = time.perf_counter() - a
print(json.dumps({"torch": round(t1-t0,2), "triton": round(t2-t1,2), "chain": times, "chain_total": round(t3-t2,2),
                  "cuda_initialised_by_import": init_after_import, "first_cuda_init_stack": stacks[0][-3000:] if stacks else None,
                  "modules": mods, "cuda_context_s": round(ctx, 2), "total": round(time.perf_counter()-t0, 2)}))
'''

def child(env=None):
    out = subprocess.run([sys.executable, "-c", CHILD, ",".join(CHAIN)], capture_output=True, text=True, env=env)
    if out.returncode:
        return {"error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])

def parallel(n):
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, ",".join(CHAIN)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - start
    totals = [json.loads(o[0].strip().splitlines()[-1])["total"] for o in outs if o[0].strip()]
    return {"n": n, "wall": round(wall, 2), "max_total": max(totals) if totals else None, "ok": len(totals)}

def main():
    res = {}
    res["cold_single"] = child()
    print("cold_single", json.dumps(res["cold_single"])[:4000], flush=True)
    a = time.perf_counter()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "16", "/tmp/sglang", "/tmp/site"], capture_output=True)
    res["compileall_s"] = round(time.perf_counter() - a, 1)
    print("compileall_s", res["compileall_s"], flush=True)
    res["warm_single"] = child()
    res["warm_single"].pop("first_cuda_init_stack", None)
    print("warm_single", res["warm_single"], flush=True)
    res["parallel17"] = parallel(17)
    print("parallel17", res["parallel17"], flush=True)
    imp = subprocess.run([sys.executable, "-X", "importtime", "-c", "import " + ", ".join(CHAIN)], capture_output=True, text=True)
    rows = []
    for line in imp.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    rows.sort(reverse=True)
    res["importtime_top"] = rows[:40]
    for r in rows[:40]:
        print("importtime", r, flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "startup_probe.json"), "w") as f:
        json.dump(res, f, indent=1)

main()
